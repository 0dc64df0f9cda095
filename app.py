#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth | deploy | destroy [-c key=value ...]`. Settings: core/settings.py."""

import sys

import aws_cdk as cdk

from ray_efa.core.settings import SettingsError
from ray_efa.infra.app import build_stacks, settings_from_app

app = cdk.App()
try:
    build_stacks(app, settings_from_app(app))
except SettingsError as error:
    # Before anything is synthesized: nothing is written to cdk.out.
    print(f"ray-efa: {error}", file=sys.stderr)
    sys.exit(1)
app.synth()
