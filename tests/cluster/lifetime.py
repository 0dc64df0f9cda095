"""Child processes that die with the process that started them, so a killed pytest leaves no control plane behind.

On Linux a child can ask the kernel for a signal when its parent dies: prctl(PR_SET_PDEATHSIG, sig), called in the
child between fork and exec (a Popen preexec_fn; the setting survives exec). The signal is SIGKILL: on SIGTERM
kube-apiserver starts its graceful termination and, with etcd terminated at the same moment, still ran 60 s later
(measured; etcd itself took 7 s), and a test plane has nothing worth a graceful shutdown (etcd runs --unsafe-no-fsync;
no data is ever reused). The kernel's "parent" is the *thread* that forked, not the process: a child started from a
thread that later ends gets the signal then. So the signal is asked for only from the main thread, which lives as long
as the process (pytest and its xdist workers, execnet's main_thread_only model since pytest-xdist 3.3, run fixtures
there); elsewhere, and off Linux, nothing is set and the children outlive a killed parent as before (docs/testing.md
says how to end them by hand).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, or None where there is none (not Linux, or a libc without it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # the C library this interpreter is linked with
    except (OSError, AttributeError):
        return None


def die_with_parent(sig: signal.Signals = signal.SIGKILL) -> Callable[[], None] | None:
    """A Popen preexec_fn that has the child sent `sig` when this process dies; None where that cannot be had
    (not Linux, no prctl, or not on the main thread: see the module's docstring)."""
    prctl = _prctl()  # looked up here, before fork: the child only calls it
    if prctl is None or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()

    def preexec() -> None:
        if prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return  # the child runs on as it would without it
        if os.getppid() != parent:  # the parent died between fork and prctl: the kernel will not signal now
            os.kill(os.getpid(), sig)

    return preexec
