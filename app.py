"""The CDK app: builds the stack from `cdk.json` context and synthesises it. Nothing more.

npm ci && npx cdk synth        # offline: writes cdk.out/
npx cdk deploy                 # needs AWS credentials and a bootstrapped account/region
"""

import os

from aws_cdk import App, Environment, Validations
from cdk_nag import AwsSolutionsChecks

from infra.settings import StackSettings
from infra.stack import HeteroStack

app = App()
settings = StackSettings.from_context(app.node.get_all_context())
HeteroStack(
    app,
    settings.stack_name,
    settings=settings,
    env=Environment(account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=settings.region),
)
Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
