"""The bottom layer: settings, the instance catalog, model presets and region facts.

Pure Python with no aws_cdk, cdk8s or torch imports: infra/, k8s/ and training/ all build on it, and the training
job imports it inside the Ray Train container.
"""
