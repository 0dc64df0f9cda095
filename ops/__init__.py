"""Operations around `cdk deploy`: capacity (before), plan (what would be deployed) and verify (after).

The logic lives here, free of argparse; cli/capacity.py, cli/plan.py and cli/verify.py are thin wrappers. AWS and
Kubernetes clients are passed in, so tests drive the same code against moto, botocore stubs and a local HTTP server.
"""

if __name__ != "ray_efa.ops":  # one name per module (ray_efa/__init__.py): never also `ops`
    raise ImportError(f"{__name__}: this folder is the package ray_efa.ops; import it as ray_efa.ops")
