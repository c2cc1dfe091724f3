"""The `onnx-reduce` command line. Option groups are defined once and shared by every subcommand."""

from __future__ import annotations

import atexit
import json
import os
import sys
import tempfile
from pathlib import Path

import click

from reducer import errors, interrupts
from reducer.errors import ReducerError, UsageError
from reducer.options import (
    DEFAULT_CHECK_TIMEOUT,
    DEFAULT_INPUT_RANGE,
    InputOptions,
    OracleOptions,
    parse_input_range,
    parse_input_shapes,
)
from strategies import DEFAULT_ORDER, check_names

CHECK_FLAGS = ("--check", "--check-inference")


def _compose(*decorators):
    def apply(function):
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    return apply


model_argument = click.argument("model", type=click.Path(dir_okay=False, path_type=str))

input_options = _compose(
    click.option("--inputs", "inputs", metavar="FILE", help="Input data: .npz keyed by input name, or a "
                 "Polygraphy --save-inputs JSON. Default: generated from --seed in --input-range."),
    click.option("--input-shapes", "input_shapes", multiple=True, metavar="NAME:[D,...]",
                 help="Shapes for dynamic inputs, Polygraphy's syntax, e.g. x:[1,3,224,224]."),
    click.option("--seed", default=0, show_default=True, help="Seed for generated inputs."),
    click.option("--input-range", "input_range", default=",".join(map(str, DEFAULT_INPUT_RANGE)),
                 show_default=True, metavar="LOW,HIGH", help="Range of generated input values."),
)

oracle_options = _compose(
    click.option("--runner", default="onnxruntime:cpu:fp16", show_default=True,
                 help="Target runner: onnxruntime:cpu:fp32|fp16|fp16-storage[:O0-O3], "
                 "onnxruntime:cuda:fp32|fp16[:tf32|notf32][:O0-O3], onnxruntime:tensorrt:fp32|fp16, "
                 "tensorrt:fp32|tf32|fp16|bf16|int8|fp8|best. "
                 "`onnx-reduce doctor` lists those usable here."),
    click.option("--fail-on", "fail_on", type=click.Choice(["nan", "tolerance", "error"]), default="nan",
                 show_default=True, help="What counts as failing, against the fp32 reference."),
    click.option("--atol", default=1e-5, show_default=True, help="Absolute tolerance (--fail-on tolerance)."),
    click.option("--rtol", default=1e-5, show_default=True, help="Relative tolerance (--fail-on tolerance)."),
    click.option("--fail-regex", "fail_regex", multiple=True,
                 help="Only failures whose log matches count (error check and --check commands)."),
    click.option("--ignore-fail-regex", "ignore_fail_regex", multiple=True,
                 help="--check output matching this counts as passing."),
    click.option("--fail-code", "fail_code", multiple=True, type=int,
                 help="--check exit codes that count as failing (others pass)."),
    click.option("--ignore-fail-code", "ignore_fail_code", multiple=True, type=int,
                 help="--check exit codes that count as passing."),
    click.option("--check-timeout", "check_timeout", default=DEFAULT_CHECK_TIMEOUT, show_default=True,
                 help="Seconds before a check is killed; a hang is a verdict."),
    click.option("--repeat", "repeat", default=1, show_default=True, metavar="N",
                 help="Runs per candidate, for flaky targets (engine builds differ from build to build)."),
    click.option("--min-fails", "min_fails", default=1, show_default=True, metavar="K",
                 help="Failing runs, of --repeat N, that make a candidate failing."),
    click.option("--faithful-max", "faithful_max", type=float, default=None,
                 help="Largest magnitude the target holds, for the faithfulness rule. Default: the runner's "
                 "(65504 for fp16); none for --check commands (say 65504 when the command runs fp16: the search "
                 "then also looks first where the reference exceeds it)."),
)


def output_option(required: bool):
    return click.option("-o", "--output", "output", type=click.Path(file_okay=False, path_type=Path),
                        required=required, help="Output directory (created; only this directory is written to).")


json_option = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
shipping_options = _compose(
    click.option("--ship", "ship", multiple=True, metavar="FILE",
                 help="Ship FILE in the bundle with the --check command (a data file its script reads); the "
                 "command names the copy. Of the files the command names, only its script ships by default."),
    click.option("--exclude", "exclude", multiple=True, metavar="FILE",
                 help="Do not ship FILE in the bundle, not even the check's script."),
)


def _input_options(kwargs) -> InputOptions:
    return InputOptions(
        inputs=kwargs["inputs"],
        input_shapes=parse_input_shapes(kwargs["input_shapes"]),
        seed=kwargs["seed"],
        input_range=parse_input_range(kwargs["input_range"]),
    )


def _oracle_options(kwargs, check_command: list[str]) -> OracleOptions:
    return OracleOptions(
        runner=kwargs["runner"],
        fail_on=kwargs["fail_on"],
        atol=kwargs["atol"],
        rtol=kwargs["rtol"],
        fail_regex=list(kwargs["fail_regex"]),
        ignore_fail_regex=list(kwargs["ignore_fail_regex"]),
        fail_code=list(kwargs["fail_code"]),
        ignore_fail_code=list(kwargs["ignore_fail_code"]),
        check_command=check_command,
        check_timeout=kwargs["check_timeout"],
        faithful_max=kwargs["faithful_max"],
        repeat=kwargs["repeat"],
        min_fails=kwargs["min_fails"],
    )


def _output_dir(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise UsageError(f"-o {path}: exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a parent that is a file, no permission, a read-only file system
        raise UsageError(f"-o {path}: cannot create it: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"-o {path}: cannot write in it (permission denied or a read-only file system)")
    return path


class _Commands(click.Group):
    def invoke(self, ctx: click.Context):
        """click takes any broken pipe (EPIPE) for a closed stdout and exits 1 without a word: one of ours (a
        worker's, a check's) is said instead, as the error it is."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            if _closed(sys.stdout) or _closed(sys.stderr):
                raise
            raise RuntimeError(f"a broken pipe: {exc}") from exc


def _closed(stream) -> bool:
    try:
        stream.flush()
    except (OSError, ValueError):
        return True
    return False


@click.group(cls=_Commands, help="Shrink a failing ONNX model to a minimal model that fails the same way.")
@click.version_option(package_name="onnx-reducer")
def cli() -> None:
    pass


@cli.command(help="Reduce MODEL to a small model that still fails the same way and carries the failure "
             "(1-minimal with --minimal); `--check CMD ...` (last) uses a command as the oracle, as "
             "`polygraphy debug reduce` does.")
@model_argument
@input_options
@oracle_options
@output_option(required=True)
@click.option("--strategy", "strategy", default=None, metavar="A,B,...",
              help="Strategies to run; the first round in this order, then by nodes removed per check; "
              "the last one closes every round (default: " + ",".join(DEFAULT_ORDER) + ").")
@click.option("--jobs", "jobs", type=int, default=None,
              help="Candidates checked at once (warm workers or commands), capped at what this machine has "
              "(usable cores, memory, visible GPUs). The first failing candidate in order wins, as with 1; "
              "bisection (prefix, suffix) probes N cut points a step, so where failing is not monotone along "
              "the order it may end on another failing cut. Default: 1, or one per visible GPU for GPU runners.")
@click.option("--max-checks", "max_checks", type=int, default=None, metavar="N",
              help="Stop after N checks in all (the first and the final re-check included), keeping the best "
              "so far: report.json says budget-exhausted; exit 0.")
@click.option("--time-limit", "time_limit", type=float, default=None, metavar="SECONDS",
              help="Stop searching after SECONDS (the check in flight finishes, then the best so far is "
              "re-checked): report.json says budget-exhausted; exit 0.")
@click.option("--no-faithful", "no_faithful", is_flag=True,
              help="Also check candidates whose cut inputs hold values the target cannot represent.")
@click.option("--minimal", "minimal", is_flag=True,
              help="Go on to a 1-minimal result (no single node can be removed), however many checks it takes. "
              "By default the search stops at about the checks boundary bisection of both ends costs "
              "(2 * bit_length(nodes) + 6, all checks counted), and leaves the strategies whose checks grow with "
              "the candidate's size (ddmin, probdd, chunks, linear) out; report.json's one_minimal says which it got.")
@click.option("--no-cause-check", "no_cause_check", is_flag=True,
              help="Skip the proof of cause for tolerance failures and --check commands (a NaN/Inf repro is "
              "its onset instead): by default the result must carry the whole model's failure (the whole model "
              "with its nodes computed exactly stops failing), so that a node failing alone by rounding is not "
              "the repro. "
              "Turn it off for a --check command that tests a build error.")
@shipping_options
@json_option
@click.pass_context
def reduce(ctx, model, output, strategy, jobs, max_checks, time_limit, no_faithful, minimal, no_cause_check,
           ship, exclude, as_json, **kwargs) -> None:
    if max_checks is not None and max_checks < 2:
        raise UsageError("--max-checks must be at least 2 (the whole model is checked first and the result last)")
    if time_limit is not None and not time_limit > 0:
        raise UsageError("--time-limit must be positive")

    names = [s.strip() for s in strategy.split(",") if s.strip()] if strategy else list(DEFAULT_ORDER)
    if not names:
        raise UsageError("--strategy: no strategy named")
    check_command = ctx.obj.get("check", [])
    inputs, oracle = _input_options(kwargs), _oracle_options(kwargs, check_command)
    oracle.jobs = jobs
    check_names(names)
    from reducer import bundle_files

    if (ship or exclude) and not check_command:
        raise UsageError("--ship and --exclude apply to --check commands only")
    bundle_options = bundle_files.bundle_options(ship, exclude)
    out_dir = _output_dir(output)
    from reducer.options import build_oracle

    warm = build_oracle(oracle)  # its workers import their runtime while the rest of the reducer loads
    warning = bundle_files.python_exit_warning(check_command, oracle.fail_code, oracle.ignore_fail_code,
                                               oracle.fail_regex)
    if warning:
        click.echo(f"onnx-reduce: warning: {warning}", err=True)
    try:
        from reducer.driver import Limits
        from reducer.progress import make_progress
        from reducer.session import reduce_model

        progress = make_progress()
    except BaseException:
        warm.close()
        raise
    try:
        # the default strategy list's default search is its bisections; strategies named with --strategy all run
        limits = Limits(max_checks, time_limit, not minimal, exhaustive=bool(strategy))
        report, code = reduce_model(model, inputs, oracle, out_dir, names, not no_faithful, progress,
                                    ctx.obj.get("argv"), limits, warm,
                                    cause_check=not no_cause_check, bundle_options=bundle_options)
    finally:
        getattr(progress, "stop", lambda: None)()
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(_summary(report, out_dir), err=True)
    ctx.exit(code)


@cli.command(help="Run the oracle once on MODEL and print the verdict and why. Exit 0: passes; 1: fails.")
@model_argument
@input_options
@oracle_options
@output_option(required=False)
@json_option
@click.pass_context
def check(ctx, model, output, as_json, **kwargs) -> None:
    from reducer.progress import make_progress
    from reducer.session import check_model

    inputs, oracle = _input_options(kwargs), _oracle_options(kwargs, ctx.obj.get("check", []))
    progress = make_progress(quiet=as_json)
    with tempfile.TemporaryDirectory(prefix="onnx-reduce-check-") as scratch:
        out_dir = _output_dir(output) if output else Path(scratch)
        try:
            verdict, nodes = check_model(model, inputs, oracle, out_dir, progress)
        finally:
            getattr(progress, "stop", lambda: None)()
    result = {"failing": verdict.failing, "nodes": nodes, **verdict.to_json()}
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        state = f"FAIL: {verdict.signature}" if verdict.failing else "PASS"
        click.echo(f"{state} — {verdict.reason}")
    ctx.exit(1 if verdict.failing else 0)  # like `polygraphy run`: usable as a --check command itself


@cli.command(help="Say which runners work on this machine (a small real model run through each) and why the "
             "others do not: TensorRT flavour and version, GPUs, CUDA driver, ONNX Runtime providers.")
@click.option("--runner", "runners", multiple=True, metavar="SPEC", help="Diagnose these runners only.")
@click.option("--no-probe", "no_probe", is_flag=True, help="Only the cheap checks: run no model.")
@json_option
def doctor(runners, no_probe, as_json) -> None:
    from reducer.doctor import diagnose, render

    report = diagnose(list(runners) or None, probe=not no_probe)
    click.echo(json.dumps(report, indent=2) if as_json else render(report))


@cli.group(help="Bug-report bundles: OUT/bundle/ and OUT/bundle.zip, written by `reduce`.")
def bundle() -> None:
    pass


@bundle.command("make", help="(Re)build OUT_DIR/bundle/ and OUT_DIR/bundle.zip from a reduction's output "
                "directory; runs the target once more on the minimal model. --ship/--exclude add to those the "
                "reduction was given.")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@shipping_options
def bundle_make(out_dir: Path, ship, exclude) -> None:
    from reducer.bundle import make_bundle
    from reducer.bundle_files import bundle_options

    if not out_dir.is_dir():
        raise UsageError(f"{out_dir}: no such directory")
    shipping = bundle_options(ship, exclude)
    from reducer import output_dir

    claim = output_dir.claim(out_dir)  # a reduction still writing there, or a second `bundle make`: refused
    try:
        result = make_bundle(out_dir, ship=shipping["ship"], exclude=shipping["exclude"])
    finally:
        claim.release()
    if result.warning:
        click.echo(f"onnx-reduce: warning: {result.warning}", err=True)
    state = "reproduced" if result.reproduced else "NOT reproduced"
    click.echo(f"{result.zip_path} ({result.zip_bytes / 1e3:.0f} kB, {result.seconds:.1f} s); the target run "
               f"again: {state}")


@bundle.command("verify", help="Replay BUNDLE (a bundle folder or .zip) with its recorded oracle on its inputs. "
                "Exit 0: reproduced; 1: not reproduced; 2: cannot run here (runner missing), not a bundle, or "
                "a check command not trusted. A bundle's check command is never run without "
                "--trust-bundle-command: it prints the command and exits 2.")
@click.argument("bundle_path", metavar="BUNDLE", type=click.Path(path_type=Path))
@click.option("--trust-bundle-command", "trust_command", is_flag=True,
              help="Run the check command recorded in the bundle, and the scripts shipped with it: code from "
              "whoever made the bundle, run as you. Read it first (report.md, repro.sh).")
@click.pass_context
def bundle_verify(ctx, bundle_path: Path, trust_command: bool) -> None:
    from reducer.bundle import verify_bundle

    code, line = verify_bundle(bundle_path, trust_command)
    click.echo(line)
    ctx.exit(code)


@cli.command(help="Check every model of CORPUS (a folder of .onnx files, searched recursively, or a .toml manifest), "
             "reduce the failing ones, each in its own `reduce` process into RUN_DIR/models/NAME/, and group them into "
             "bugs by their repro's signature: RUN_DIR/summary.json and junit.xml. The reduce options are every "
             "model's defaults; a manifest overrides them per model. Running the same command again resumes. "
             "Exit 0: no new bug; 1: new bugs; 2: bad input.")
@click.argument("corpus", type=click.Path(path_type=Path))
@input_options
@oracle_options
@output_option(required=True)
@click.option("--strategy", "strategy", default=None, metavar="A,B,...", help="As for reduce.")
@click.option("--max-checks", "max_checks", type=int, default=None, metavar="N", help="As for reduce, per model.")
@click.option("--time-limit", "time_limit", type=float, default=None, metavar="SECONDS",
              help="As for reduce, per model's search.")
@click.option("--no-faithful", "no_faithful", is_flag=True, help="As for reduce.")
@click.option("--minimal", "minimal", is_flag=True, help="As for reduce.")
@click.option("--no-cause-check", "no_cause_check", is_flag=True, help="As for reduce.")
@click.option("--jobs", "jobs", type=int, default=1, show_default=True,
              help="Models reduced side by side (capped at the usable cores, memory and, for GPU runners, GPUs: one "
              "GPU per model). Processes in all: about --jobs x --reduce-jobs.")
@click.option("--reduce-jobs", "reduce_jobs", type=int, default=1, show_default=True,
              help="Each reduction's own --jobs.")
@click.option("--model-timeout", "model_timeout", type=float, default=3600.0, show_default=True, metavar="SECONDS",
              help="A model's reduction is killed (its process group) after this long: a timeout record.")
@click.option("--baseline", "baseline", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="PREV_RUN_DIR", help="A previous batch's RUN_DIR: each bug is new, still failing or fixed "
              "(fixed once its models pass and its bundle no longer reproduces here).")
@click.option("--cache", "cache", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Results shared from night to night: a model whose bytes, inputs, check script, options and "
              "runtime versions are unchanged since a night that finished it gets that result, with no check.")
@click.option("--executor", "executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: --jobs reductions side by side on this machine. ray: each model a Ray task (one GPU for a "
              "GPU runner, --reduce-jobs CPUs otherwise) on the cluster at --address or RAY_ADDRESS, else on a "
              "fresh local Ray instance; the corpus, RUN_DIR and --cache on a filesystem every node shares.")
@click.option("--address", "address", default=None, metavar="ADDR",
              help="The Ray cluster to run on (with --executor ray), e.g. head-node:6379.")
@click.pass_context
def batch(ctx, corpus, output, jobs, reduce_jobs, model_timeout, baseline, cache, executor, address,
          **kwargs) -> None:
    from reducer.batch import BatchOptions, run_batch
    from reducer.batch_corpus import absolute_if_there

    check_command = [absolute_if_there(arg, Path.cwd()) for arg in ctx.obj.get("check", [])]
    _input_options(kwargs), _oracle_options(kwargs, check_command)  # bad values: refused before any model runs
    if kwargs["strategy"]:
        check_names([s.strip() for s in kwargs["strategy"].split(",") if s.strip()])
    for flag, value in (("--jobs", jobs), ("--reduce-jobs", reduce_jobs)):
        if value < 1:
            raise UsageError(f"{flag} must be at least 1")
    if not 0 < model_timeout < 1e9:
        raise UsageError(f"--model-timeout must be a positive number of seconds, got {model_timeout:g}")
    if address is not None and executor != "ray":
        raise UsageError("--address goes with --executor ray")
    if executor == "ray":
        from reducer.batch_ray import require_ray

        require_ray()  # before any model runs
    if baseline is not None and not baseline.is_dir():
        raise UsageError(f"--baseline {baseline}: no such directory")
    if kwargs["inputs"]:
        kwargs["inputs"] = os.path.abspath(kwargs["inputs"])
    defaults = {**kwargs, "input_shapes": list(kwargs["input_shapes"]), "jobs": reduce_jobs, "check": check_command}
    options = BatchOptions(defaults, jobs, model_timeout, cache=cache.absolute() if cache else None,
                           executor=executor, address=address)
    ctx.exit(run_batch(corpus, _output_dir(output), options, baseline))


def _summary(report: dict, out_dir: Path) -> str:
    status = report["status"]
    figures = (f"{report['nodes_before']} -> {report['nodes_after']} nodes in {report.get('checks', 0)} checks "
               f"({report.get('cache_hits', 0)} cache hits), {report.get('seconds', 0):.1f} s")
    bundle = report.get("bundle") or {}
    if bundle.get("zip"):
        figures += f"; bug-report bundle {out_dir / bundle['zip']} ({bundle['zip_bytes'] / 1e3:.0f} kB)"
    if status == "reduced":
        return f"reduced {figures}: {out_dir / report['minimal']} fails with {_signature(report)}"
    if status == "budget-exhausted":
        return (f"stopped at {report.get('stopped_by')}, {figures}: {out_dir / report['minimal']} (not minimal) "
                f"fails with {_signature(report)}")
    if status == "not-failing":
        return f"not failing: {report.get('original', {}).get('reason', '')} (nothing to reduce)"
    if status == "flaky":
        return (f"flaky: {report.get('original', {}).get('reason', '')}; try more --repeat runs or a lower "
                "--min-fails")
    if status == "no-verdict":
        killed = report.get("final") or report.get("original") or {}
        return f"no verdict: a check was killed from outside ({killed.get('reason', '')}); none is cached: run again"
    if status == "interrupted":
        return f"interrupted after {figures}; {out_dir / 'minimal.onnx'} holds the best so far"
    return f"{status}: {figures}; the final model did not fail again on a re-check (flaky oracle?)"


def _signature(report: dict) -> str:
    signature = report.get("signature") or {}
    where = ", ".join(signature.get("outputs", [])[:3])
    return f"{signature.get('kind', '?')}{' ' + signature['detail'] if signature.get('detail') else ''}" + (
        f" in {where}" if where else ""
    )


def split_check_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """`--check CMD ARGS...` (Polygraphy's way) or `-- CMD ARGS...` ends the options: the rest is the command."""
    for index, token in enumerate(argv):
        if token in CHECK_FLAGS or token == "--":
            command = argv[index + 1 :]
            if not command:
                raise UsageError(f"{token}: no command given")
            return argv[:index], command
    return argv, []


def main(argv: list[str] | None = None) -> None:
    original = argv
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    try:
        if original is None:  # the program itself: SIGTERM ends it as Ctrl-C does (not a caller's in-process call)
            interrupts.install()
        argv, command = split_check_command(argv)
        obj = {"check": command, "argv": list(sys.argv[1:] if original is None else original)}
        code = cli.main(args=argv, prog_name="onnx-reduce", standalone_mode=False, obj=obj)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.ClickException as exc:  # usage errors: one line, exit 2
        message = exc.format_message()
        missing = exc.param if isinstance(exc, click.MissingParameter) else None
        given = [t for t in command if t in missing.opts] if missing is not None else []
        if given:  # it went to the command: --check ends the options
            message += f" ('{given[0]}' is there, after --check: all after it is the check command; put --check last)"
        click.echo(f"onnx-reduce: error: {message}", err=True)
        code = errors.EXIT_BAD_INPUT
    except click.Abort:
        click.echo("onnx-reduce: interrupted", err=True)
        code = errors.EXIT_INTERRUPTED
    except KeyboardInterrupt:
        click.echo("onnx-reduce: interrupted", err=True)
        code = errors.EXIT_INTERRUPTED
    except Exception as exc:
        if interrupts.received():  # what the interrupt broke on its way (an import, a worker): not the cause
            click.echo("onnx-reduce: interrupted", err=True)
            code = errors.EXIT_INTERRUPTED
        elif isinstance(exc, ReducerError):
            click.echo(f"onnx-reduce: error: {exc}", err=True)
            code = exc.exit_code
        elif os.environ.get("ONNX_REDUCE_DEBUG"):
            raise
        else:  # a bug of ours: say so in one line; the traceback only on request
            click.echo(f"onnx-reduce: internal error: {type(exc).__name__}: {exc} "
                       "(set ONNX_REDUCE_DEBUG=1 for the traceback)", err=True)
            code = errors.EXIT_INTERNAL
    if code == errors.EXIT_INTERRUPTED:
        code = interrupts.exit_code()  # 143 after SIGTERM
    if original is None:  # the program itself, not a caller's in-process call
        _exit_now(code or 0)
    sys.exit(code or 0)


def _exit_now(code: int) -> None:
    """Exit without the interpreter's teardown: every file is written and closed and every worker gone
    by now, and tearing down onnx, numpy, networkx and the runtime took about 90 ms, 8% of a small
    model's whole reduction. Exit handlers still run."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to say there
            pass
    os._exit(code)


if __name__ == "__main__":
    main()
