"""Old import path, kept until steps/train/launcher.py imports steps.train.tf_data_service; then delete."""
from steps.train.tf_data_client import TfDataService  # noqa: F401
from steps.train.tf_data_service import run_tf_data_host  # noqa: F401
