"""The platform's naming and node-label conventions."""

TEAM = "research"

SYSTEM_NODE_LABELS = {"platform.example.com/pool": "system"}
"""The platform's own nodes for controllers: the KubeRay operator, the Ray head and the job submitter run here."""

GPU_NODE_LABELS = {"platform.example.com/pool": "gpu", "platform.example.com/team": TEAM}
"""What the platform labels its GPU nodes with; the EFA node group gets these labels."""


def cluster_name(environment: str) -> str:
    return f"{TEAM}-{environment}"
