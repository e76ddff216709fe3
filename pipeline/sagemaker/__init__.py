"""The SageMaker backend: the graph compiled into a pipeline definition (`definition`, `compiler`), the requests
checked as the service checks them (`validation`, `dependencies`), the images and instances it runs on, and the
deployed pipeline's executions started and watched (`executions`). Nothing here runs a job on this machine.

Importing this package imports nothing: the SageMaker SDK loads with `definition` and `compiler` only.
"""
