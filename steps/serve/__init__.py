"""A trained model served as SageMaker's inference containers serve it: the handler functions their toolkits call."""
