"""The `hetero` verbs, one module each (run, params, start, plan, prices, report, executions, definition, models, iam):
each declares its options (`add_parser`) and does its work (`run`); `pipeline.cli` assembles them. The parameter
layers (`parameters`), the workload check (`workload`), the plan and report pages (`plan_view`) and the run's table
(`summary`) are theirs too.
"""
