"""The CDK app: builds the stack from `cdk.json` context and synthesises it. Nothing more.

npm ci && npx cdk synth        # offline: writes cdk.out/
npx cdk deploy                 # needs AWS credentials and a bootstrapped account/region
"""

import os
import sys

from aws_cdk import App, Environment, Validations
from cdk_nag import AwsSolutionsChecks

from infra.settings import StackSettings
from infra.stack import HeteroStack
from steps.common.errors import EXIT_USER_ERROR, UserError


def main() -> int:
    app = App()
    try:
        settings = StackSettings.from_context(app.node.get_all_context())
        HeteroStack(
            app,
            settings.stack_name,
            settings=settings,
            env=Environment(account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=settings.region),
        )
    except UserError as exc:  # a bad cdk.json / -c setting: the one line that names it and the fix, not a traceback
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return EXIT_USER_ERROR
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
