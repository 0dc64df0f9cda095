#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth | deploy | destroy [-c key=value ...]`. Settings: core/settings/__init__.py."""

import sys

import aws_cdk as cdk

from ray_efa.core.settings import SettingsError
from ray_efa.infra.app import build_stacks, settings_from_app
from ray_efa.k8s.code_bundle import ManifestError

app = cdk.App()
try:
    build_stacks(app, settings_from_app(app))
except (SettingsError, ManifestError) as error:
    # Bad settings, a memory plan that cannot fit, manifests too large to apply: before anything is synthesized,
    # nothing is written to cdk.out.
    print(f"ray-efa: {error}", file=sys.stderr)
    sys.exit(1)
app.synth()
