"""A platform team's CDK app that embeds ray-efa-stack: its own `infra` and `core` packages beside `ray_efa`.

npx cdk synth        (in this folder; offline: no lookups, explicit region, imported ids as attributes)
"""

import aws_cdk as cdk

from infra.stacks import ImportedClusterGpu, PlatformWithRay

app = cdk.App()
env = cdk.Environment(region="us-west-2")
ImportedClusterGpu(app, "ImportedClusterGpu", env=env)
PlatformWithRay(app, "PlatformWithRay", env=env)
app.synth()
