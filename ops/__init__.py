"""Operations around `cdk deploy`: capacity (before), plan (what would be deployed) and verify (after).

The logic lives here, free of argparse; cli/capacity.py, cli/plan.py and cli/verify.py are thin wrappers. AWS and
Kubernetes clients are passed in, so tests drive the same code against moto, botocore stubs and a local HTTP server.
"""
