"""Options and helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ray_efa.core.context import (
    ResolvedSettings,
    find_app_dir,
    merge_context,
    parse_overrides,
    read_context,
    resolve_settings,
)
from ray_efa.core.settings import Problem, Settings, SettingsError

if TYPE_CHECKING:
    from ray_efa.k8s.code_archive import CodeArchive

EXIT_USAGE = 2
"""Bad usage or unreadable input, everywhere: bad arguments, bad settings, a file that cannot be read or parsed, an
output folder that may not be written. The message names the file, argument or setting; there is no traceback."""

JSON_DIGITS = 6
"""Significant digits of the floats in --json output (settings values keep theirs)."""

EXIT_NOT_INSTALLED = 4
"""A command that needs an extra that is not installed (`ray-efa train` without torch, `ray-efa report` without
matplotlib)."""

TRAIN_EXTRA_MODULES = ("torch", "ray", "transformers")
"""What `pip install 'ray-efa-stack[train]'` adds to the base install (which has the constructs, manifests and CLI)."""


def add_context_option(parser: argparse.ArgumentParser) -> None:
    """`-c key=value`, repeatable: the same overrides `cdk -c` takes."""
    parser.add_argument(
        "-c",
        "--context",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting, as with `cdk -c` (repeatable)",
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of tables")


def rounded(value: Any, digits: int = JSON_DIGITS) -> Any:
    """`value` with every float rounded to `digits` significant digits (14.151399999999999 -> 14.1514)."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value


def print_json(data: Mapping[str, Any], *, exact: Iterable[str] = ()) -> None:
    """Print --json output: snake_case keys (docs/commands.md), floats rounded except under the top-level keys `exact`."""
    keep = set(exact)
    print(json.dumps({k: (v if k in keep else rounded(v)) for k, v in data.items()}, indent=2, default=str))


def fail(
    args: argparse.Namespace, command: str, message: str, *, code: int = EXIT_USAGE, problems: list[dict] | None = None
) -> int:
    """Report an error the one way every subcommand does; return `code` (2 unless given).

    stderr always gets one line `ray-efa COMMAND: message` (plus one line per problem); with --json, stdout also
    gets `{"error": ..., "exit_code": ..., "problems": [...]}` so that a script reading stdout sees the failure.
    """
    if getattr(args, "json", False):
        print(json.dumps({"error": message, "exit_code": code, "problems": problems or []}, default=str))
    details = "".join(f"\n  - {p['key']}: {p['message']}, got {p['value']!r}" for p in problems or [])
    print(f"ray-efa {command}: {message}{details}", file=sys.stderr)
    return code


def add_kube_options(parser: argparse.ArgumentParser) -> None:
    """`--kubeconfig PATH` and `--kube-context NAME` (kubectl's --context; -c/--context is for settings only): what
    kube_api_client reads."""
    parser.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    parser.add_argument(
        "--kube-context", dest="kube_context", metavar="NAME", help="kubeconfig context (default: the current one)"
    )
    add_request_timeout_option(parser, "the Kubernetes API server (a log stream excepted: it waits for lines)")


REQUEST_TIMEOUT_S = 30.0
"""How long one call to the Kubernetes API or AWS waits to connect, and then for the answer, by default: long enough
for a slow EKS endpoint, short enough that an endpoint that never answers is an error, not a hang."""


def add_request_timeout_option(parser: argparse.ArgumentParser, what: str) -> None:
    """`--request-timeout SECONDS` (kubectl's flag, in seconds): the bound on each call to `what`."""
    parser.add_argument(
        "--request-timeout",
        dest="request_timeout",
        type=_positive_seconds,
        default=REQUEST_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up on one call to {what} after SECONDS to connect and SECONDS "
        f"for the answer (default: {REQUEST_TIMEOUT_S:g})",
    )


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def bearer_token_where_the_client_reads_it(configuration: Any) -> None:
    """Have `configuration` send the kubeconfig's bearer token (a `token:`, or an exec plugin's such as EKS's `aws eks
    get-token`), now and after each refresh.

    kubernetes 36.0.0's kubeconfig loader stores the token under api_key["authorization"], but its generated
    `auth_settings` reads api_key["BearerToken"]: the token is never sent and every request is `system:anonymous`
    (kubernetes-client/python#2582, fixed by #2585 in later releases). A loader that already writes "BearerToken"
    leaves nothing to copy."""
    refresh = configuration.refresh_api_key_hook

    def refresh_and_copy(config: Any) -> None:
        if refresh is not None:
            refresh(config)  # the loader's own: reloads an expired exec token into api_key["authorization"]
        config.refresh_api_key_hook = refresh_and_copy  # the loader's refresh puts its own hook back: stay first
        if "authorization" in config.api_key:
            config.api_key["BearerToken"] = config.api_key["authorization"]

    if "authorization" in configuration.api_key or refresh is not None:
        refresh_and_copy(configuration)


class KubeconfigError(Exception):
    """The kubeconfig (or its context) cannot be loaded; the message says which and how to get one for EKS."""


def kube_api_client(args: argparse.Namespace) -> Any:
    """A kubernetes ApiClient from --kubeconfig (default: kubectl's) and --kube-context, its calls bounded by
    --request-timeout (BoundedApiClient); KubeconfigError if the kubeconfig cannot be loaded."""
    import urllib3
    import yaml
    from kubernetes import config
    from kubernetes.client.configuration import Configuration

    try:
        configuration = type.__call__(Configuration)  # what new_client_from_config does: not the global default
        config.load_kube_config(
            config_file=args.kubeconfig, context=args.kube_context, client_configuration=configuration
        )
    except (config.ConfigException, OSError, yaml.YAMLError, ValueError, TypeError, AttributeError) as error:
        # kubernetes' loader raises ConfigException for most bad files, but YAMLError for a file that is not YAML and
        # ValueError/TypeError/AttributeError for YAML of the wrong shape: all are an unreadable kubeconfig.
        where = args.kubeconfig or "the default kubeconfig"
        context = f" context {args.kube_context}" if args.kube_context else ""
        message = " ".join(str(error).split()) or type(error).__name__
        raise KubeconfigError(
            f"cannot load {where}{context}: {message} "
            "(for EKS: aws eks update-kubeconfig --name CLUSTER --region REGION)"
        ) from None
    bearer_token_where_the_client_reads_it(configuration)
    # urllib3 retries a GET 3 times by default, also after a read timeout: one retry of a read keeps a dropped
    # connection during a long `follow` survivable without making a silent server cost 4 x --request-timeout.
    configuration.retries = urllib3.Retry(total=3, read=1)
    from ray_efa.cli._kube import BoundedApiClient

    return BoundedApiClient(configuration, timeout_s=getattr(args, "request_timeout", REQUEST_TIMEOUT_S))


EXIT_UNREACHABLE = 1
"""The cluster's API server or AWS could not be reached or refused us (network, DNS, TLS, timeout, 401/403)."""


def unreachable_message(error: BaseException, *, endpoint: str | None = None) -> str | None:
    """One line naming the endpoint and what to check, for an error talking to the Kubernetes API or AWS; None for
    any other error (which then propagates as a bug). urllib3 wraps the cause in MaxRetryError.reason (kubernetes'
    rest client goes through urllib3); kubernetes raises ApiException with .status for HTTP errors (the CLI's client
    adds the endpoint to a 401/403: cli._kube.KubeApiRefused); botocore raises EndpointConnectionError (refused, DNS),
    SSLError, Connect/ReadTimeoutError, NoCredentialsError and ClientError (with Error.Code AccessDenied...), which
    names no endpoint: `endpoint` says which AWS endpoint was called."""
    import socket
    import ssl

    from urllib3 import exceptions as u3

    cause: BaseException = error
    if isinstance(error, u3.MaxRetryError):
        cause = error.reason or error
        endpoint = f"{error.pool.scheme}://{error.pool.host}:{error.pool.port}" if error.pool else "the API server"
        text = str(cause)
        if isinstance(cause, u3.SSLError) or "CERTIFICATE_VERIFY_FAILED" in text:
            return (
                f"TLS error talking to {endpoint}: {_short(text)}; check the kubeconfig's "
                "certificate-authority-data is this cluster's (aws eks update-kubeconfig rewrites it)"
            )
        if isinstance(cause, u3.NameResolutionError) or "Name or service not known" in text or "resolve" in text:
            return (
                f"cannot resolve the host of {endpoint}; check the kubeconfig's server address (aws eks "
                "update-kubeconfig --name CLUSTER --region REGION)"
            )
        if isinstance(cause, u3.NewConnectionError):
            return (
                f"cannot connect to {endpoint}: connection refused or unreachable; check that the cluster exists "
                "and the kubeconfig's server and context point at it"
            )
        # after NewConnectionError: urllib3 2 makes it a subclass of ConnectTimeoutError
        if isinstance(cause, (u3.ReadTimeoutError, u3.ConnectTimeoutError)):
            return (
                f"timed out talking to {endpoint} (--request-timeout); check the network path (VPN, security "
                "group, the cluster endpoint's public access CIDRs) to the API server"
            )
        return f"cannot reach {endpoint}: {_short(text)}"
    if isinstance(error, (ssl.SSLError, socket.timeout, TimeoutError, u3.TimeoutError)):
        return f"cannot reach {endpoint or 'the API server'}: {type(error).__name__}: {_short(str(error))}"
    try:
        from kubernetes.client.exceptions import ApiException

        from ray_efa.cli._kube import NotKubernetesApi
    except ImportError:  # pragma: no cover - kubernetes is a base dependency
        ApiException = NotKubernetesApi = ()  # type: ignore[assignment]  # noqa: N806
    if isinstance(error, NotKubernetesApi):
        return str(error)
    if isinstance(error, ApiException) and error.status in (401, 403):
        what = "not authenticated (401)" if error.status == 401 else "forbidden (403)"
        at = getattr(error, "endpoint", None) or endpoint
        return (
            f"the Kubernetes API server{f' at {at}' if at else ''} answered {what}: {_status_message(error)}; "
            "check the kubeconfig's user and credentials (for EKS: aws sts get-caller-identity, and the "
            "cluster's access entries: adminPrincipalArns)"
        )
    try:
        from botocore import exceptions as bce
    except ImportError:  # pragma: no cover
        return None
    if isinstance(error, bce.SSLError):
        return (
            f"TLS error talking to AWS at {error.kwargs.get('endpoint_url')}: {_short(str(error.kwargs.get('error')))}; "
            "check AWS_CA_BUNDLE and any proxy that intercepts TLS"
        )
    if isinstance(error, (bce.ConnectTimeoutError, bce.ReadTimeoutError)):
        return (
            f"timed out talking to AWS at {error.kwargs.get('endpoint_url')} (--request-timeout); check the network "
            "path (proxy, VPN) to AWS"
        )
    if isinstance(error, bce.EndpointConnectionError):
        url = error.kwargs.get("endpoint_url")
        if isinstance(error.kwargs.get("error"), (u3.NameResolutionError, socket.gaierror)):
            return (
                f"cannot resolve the host of {url}; check the region and any AWS_ENDPOINT_URL* setting, and "
                "the DNS of this machine"
            )
        return f"cannot connect to AWS at {url}; check the network, the region and any AWS_ENDPOINT_URL* setting"
    if isinstance(error, (bce.ConnectionClosedError, bce.HTTPClientError)):
        return f"cannot reach AWS at {error.kwargs.get('endpoint_url')}: {_short(str(error))}; check the network"
    if isinstance(error, (bce.NoCredentialsError, bce.PartialCredentialsError)):
        return "no AWS credentials found; check AWS_PROFILE / aws configure (aws sts get-caller-identity)"
    if isinstance(error, bce.ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        http = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if http in (401, 403) or code in (
            "AccessDenied",
            "AccessDeniedException",
            "UnauthorizedOperation",
            "UnrecognizedClientException",
            "InvalidClientTokenId",
            "ExpiredToken",
            "AuthFailure",
        ):
            at = f" at {endpoint}" if endpoint else ""
            return (
                f"AWS{at} refused {error.operation_name}: {code or http}; check the credentials' identity "
                "(aws sts get-caller-identity) and its IAM permissions"
            )
    return None


def _short(text: str, limit: int = 160) -> str:
    """`text` on one line, at most `limit` characters: an error's text inside a one-line message."""
    return " ".join(text.split())[:limit]


def _status_message(error: Any) -> str:
    """The message of the API server's Status body (`User "x" cannot get ...`), else the HTTP reason."""
    body = getattr(error, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (ValueError, AttributeError):
        message = None
    return _short(str(message or error.reason or ""))


def resolve_or_exit(
    args: argparse.Namespace,
    extra_layers: Iterable[tuple[str, Mapping[str, Any]]] = (),
    *,
    require_fit: bool = False,
    require_code: bool = False,
    require_model: bool = False,
) -> ResolvedSettings:
    """Resolve settings from the project's context and `-c`; on bad settings print every problem and exit 2.

    `require_fit`: the command produces a training job, so a memory plan that cannot fit the GPUs is bad settings too
    (core.strategy.check_fits names what to change). `require_code`: the command runs or ships the train function, so
    a trainFunction missing from codeDir, or a codeDir that cannot be shipped, is bad settings too
    (core.user_code.check_user_code; nothing is imported). `require_model`: the command plans the model, so
    modelPath's architecture must be readable here (core.model_source.model_problems; require_fit checks both too).
    Every problem of these checks is reported at once.
    """
    try:
        resolved = resolve_settings(parse_overrides(args.context), extra_layers=extra_layers)
        _check(
            resolved.settings,
            resolved.app_dir,
            require_fit=require_fit,
            require_code=require_code,
            require_model=require_model,
        )
        return resolved
    except SettingsError as error:
        _exit_invalid(args, error)


def check_or_exit(
    args: argparse.Namespace,
    settings: Settings,
    app_dir: Path | None,
    *,
    require_fit: bool = False,
    require_code: bool = False,
    require_model: bool = False,
) -> None:
    """resolve_or_exit's checks of settings made otherwise (ray-efa submit: the local ones on the deployed cluster's);
    on bad settings print every problem and exit 2."""
    try:
        _check(settings, app_dir, require_fit=require_fit, require_code=require_code, require_model=require_model)
    except SettingsError as error:
        _exit_invalid(args, error)


def _check(
    settings: Settings, app_dir: Path | None, *, require_fit: bool, require_code: bool, require_model: bool
) -> None:
    problems: list[Problem] = []
    if require_code or require_fit:
        from ray_efa.core.user_code import check_user_code

        try:
            check_user_code(settings, app_dir=app_dir)
        except SettingsError as error:
            problems.extend(error.problems)
    if require_model or require_fit:
        from ray_efa.core.model_source import model_problems

        problems.extend(model_problems(settings.training))
    if problems:
        raise SettingsError(problems)
    if require_fit:
        from ray_efa.core.model_source import pod_path_problems
        from ray_efa.core.strategy import check_fits

        if problems := pod_path_problems(settings):  # the job's paths: each one a pod can read
            raise SettingsError(problems)
        check_fits(settings)


def _exit_invalid(args: argparse.Namespace, error: SettingsError) -> NoReturn:
    if getattr(args, "json", False):
        print(
            json.dumps(
                {
                    "error": "invalid settings",
                    "exit_code": EXIT_USAGE,
                    "problems": [{"key": p.key, "value": p.value, "message": p.message} for p in error.problems],
                },
                default=str,
            )
        )
    print(f"ray-efa: {error}", file=sys.stderr)
    sys.exit(EXIT_USAGE)


def resolve_local_or_exit(args: argparse.Namespace, command: str, *, require_code: bool = False) -> ResolvedSettings:
    """The settings of a local run: the --local preset (training.local) below `-c` and, for a run that brings no
    inputs of its own, the tiny model folder's layer above it (made in the model cache on first use; said on stdout).
    Exits 2 on bad settings (as resolve_or_exit), 1 when no tiny model folder can be made on this machine."""
    from ray_efa.training.local import LOCAL_PRESET, tiny_model_layer
    from ray_efa.training.tiny_model import TinyModelError

    layers: list[tuple[str, Mapping[str, Any]]] = [("--local preset", LOCAL_PRESET)]
    try:  # every layer but the tiny model's, merged as resolve_settings merges them
        context = merge_context(
            [*(values for _, values in read_context(find_app_dir())), LOCAL_PRESET, parse_overrides(args.context)]
        )
    except SettingsError:  # unreadable context or a malformed -c: resolve_or_exit below says which
        context = None
    try:
        tiny = tiny_model_layer(context) if context is not None else None
    except (TinyModelError, OSError) as error:
        sys.exit(
            fail(
                args,
                command,
                f"cannot make the local run's tiny model folder: {error}; give your own inputs "
                "(-c modelPath=... -c dataset=...) or random tokens (-c dataPoolSize=8)",
                code=1,
            )
        )
    if tiny is not None:
        name, values = tiny
        layers.append(tiny)
        print(
            f"{name}: fine-tuning modelPath {values['modelPath']} on dataset {values['dataset']} (English license "
            f"texts of the installed packages, evalFraction {values['evalFraction']} held out); `ray-efa tiny-model "
            "DIR` writes such a folder of your own"
        )
    return resolve_or_exit(args, extra_layers=layers, require_code=require_code)


PLOTS_EXTRA_MODULES = ("matplotlib",)
"""What `pip install 'ray-efa-stack[plots]'` adds: the charts of `report`, `plan --plot` and `compare --plot`."""


def missing_plots_extra(command: str) -> int | None:
    """None when matplotlib imports; else say how to install it and return EXIT_NOT_INSTALLED."""
    missing = []
    for name in PLOTS_EXTRA_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if not missing:
        return None
    print(
        f"ray-efa {command}: the charts need {', '.join(missing)}, which this install lacks: "
        "pip install 'ray-efa-stack[plots]'",
        file=sys.stderr,
    )
    return EXIT_NOT_INSTALLED


def write_chart(args: argparse.Namespace, command: str, figure: Any, what: str) -> int:
    """Write `figure` to args.plot as a ray-efa PNG (replacing only a chart of ours) and say where; 0, or 2 (`fail`)
    when the file cannot be written. The line goes to stderr with --json, so that stdout stays one JSON document."""
    from ray_efa.core.output_dir import OutputDirError, publish_file
    from ray_efa.ops.plots import is_ray_efa_png, png_bytes

    try:
        path = publish_file(args.plot, png_bytes(figure, command=f"{command} --plot"), is_ours=is_ray_efa_png)
    except OutputDirError as error:
        return fail(args, command, f"--plot: {error}")
    except OSError as error:
        return fail(args, command, f"--plot: cannot write {args.plot}: {error.strerror or error}")
    print(f"{what}: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def missing_train_extra(command: str) -> int | None:
    """None when torch, Ray and transformers import; else say how to install them and return EXIT_NOT_INSTALLED."""
    missing = [name for name in TRAIN_EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    print(
        f"ray-efa {command}: training needs {', '.join(missing)}, which this install lacks (the base install has the "
        "CDK constructs, manifests and CLI only): pip install 'ray-efa-stack[train]'",
        file=sys.stderr,
    )
    return EXIT_NOT_INSTALLED


def follow_command(job: str, namespace: str) -> str:
    """The `ray-efa follow` line for RayJob `job` in `namespace` (with -c namespace= only where it is not the default)."""
    default = Settings.from_context({}).workload.namespace
    return f"ray-efa follow {job}" + (f" -c namespace={namespace}" if namespace != default else "")


def kubectl_code_route(settings: Settings) -> tuple[CodeArchive | None, str | None]:
    """How codeDir ships on the kubectl path (`manifests`, `submit`): (None, None) in a ConfigMap, or there is no
    codeDir; (archive, None) as a zip under storagePath (k8s.code_archive), for code too large or binary for a
    ConfigMap when storagePath is on S3; (None, problem) neither, the problem naming the settings and the routes."""
    from ray_efa.core.user_code import code_dir_path
    from ray_efa.k8s.code_archive import build_code_archive
    from ray_efa.k8s.code_bundle import ManifestError, config_map_problem
    from ray_efa.k8s.names import ray_job_of, user_code_config_map_name

    code_dir = code_dir_path(settings)
    if code_dir is None:
        return None, None
    problem = config_map_problem(code_dir, user_code_config_map_name(ray_job_of(settings)))
    if problem is None:
        return None, None
    storage = settings.workload.storage_path
    if storage is None or not storage.startswith("s3://"):
        return None, (
            f"codeDir {settings.workload.code_dir} cannot ship in a ConfigMap: {problem}. Larger or binary code ships "
            f"as a zip under an s3:// storagePath (storagePath is {storage or 'unset'}; the cluster stack's output "
            "CheckpointStoragePath is one), which `ray-efa submit` uploads and `ray-efa manifests` writes with its "
            "upload command; or as an S3 asset with `cdk deploy` (RayTrainingJob)"
        )
    try:
        return build_code_archive(code_dir, storage_path=storage), None
    except ManifestError as error:
        return None, str(error)
