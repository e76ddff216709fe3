"""The CDK app's constructs (one per file) and the stack that wires them (`infra.stack`).

Imports flow one way: `app.py` -> `infra` -> `pipeline` -> `steps`. Step code is
reached only by path (packed into the training-code asset), never imported here.
"""
