"""Errors the user caused (bad model, bad flags): one line each, a documented exit code."""

# Exit codes, documented in README.md.
EXIT_REDUCED = 0  # also when --max-checks or --time-limit stopped the search: status budget-exhausted
EXIT_NOT_FAILING = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_REPRODUCED = 3
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (CI, `timeout`, `docker stop`): ends the reduction as Ctrl-C does


class ReducerError(Exception):
    """A problem with what the user gave us; printed as one line, never as a traceback."""

    exit_code = EXIT_BAD_INPUT


class BadModelError(ReducerError):
    pass


class BadInputsError(ReducerError):
    pass


class UsageError(ReducerError):
    pass


class RunnerUnavailableError(ReducerError):
    """The runner cannot run on this machine (runtime, GPU or provider missing): `onnx-reduce doctor` says more."""
