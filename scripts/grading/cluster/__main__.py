"""Grade a class on a Slurm cluster: one job array through submitit, one node per task (staff only).

    python -m scripts.grading.cluster submit export/ --results-dir R --nodes 8 --partition gpu --gpus-per-node 8 \\
        --time 6:00:00 -- --backend nccl --world-sizes 2,4,8 --deadline 60
    python -m scripts.grading.cluster status R            # per task (Slurm) and per submission (R)
    python -m scripts.grading.cluster resubmit R --missing  # what has no result, none of it queued or running
    python -m scripts.grading.cluster collect R           # the CSV, the dashboard, R ready for gpu_results pack

Everything after ``--`` goes to the grader as it would to ``python -m scripts.grading --batch`` (not ``--csv``,
``--results-dir``, ``--jobs``: the cluster grader sets those). ``--cluster local`` runs the array on this machine
(submitit's local executor) where there is no Slurm. The guide: handouts/grading.md, "Grading on a cluster".
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from scripts.grading.cluster.collect import collect
from scripts.grading.cluster.shards import cost, export_submissions, part_budgets, plan_shards
from scripts.grading.cluster.slurm import print_status, queued_names
from scripts.grading.cluster.store import REPO, Store, grader_version

BATCH_ONLY = ("--csv", "--results-dir", "--jobs", "--batch", "--out")  # the cluster grader's to set


def minutes(text: str) -> int:
    """Slurm's time formats (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``) -> minutes."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"--time {text!r}: use minutes, HH:MM:SS or D-HH:MM:SS")
    days, a, b, c = (int(x) if x else None for x in m.groups())
    if days is not None:  # D-HH[:MM[:SS]]
        return days * 1440 + a * 60 + (b or 0) + (1 if c else 0)
    if c is not None:  # HH:MM:SS
        return a * 60 + b + (1 if c else 0)
    return a + (1 if b else 0)  # MM[:SS]


def executor(store: Store, options: dict, parallelism: int):
    import submitit

    ex = submitit.AutoExecutor(folder=store.logs / "%j", cluster=options["cluster"])
    ex.update_parameters(name="cs336-grade", timeout_min=options["time_min"], nodes=1, tasks_per_node=1,
                         slurm_array_parallelism=parallelism, slurm_exclusive=True,
                         slurm_setup=[f"cd {REPO}"],
                         # the step gets the whole node (CPUs, GPUs), not srun's default of one CPU per task
                         slurm_srun_args=["--whole"])  # fmt: skip
    if options.get("partition"):
        ex.update_parameters(slurm_partition=options["partition"])
    if options.get("gpus_per_node"):
        ex.update_parameters(gpus_per_node=options["gpus_per_node"])
    if options.get("cpus_per_task"):
        ex.update_parameters(cpus_per_task=options["cpus_per_task"])
    if options.get("sbatch"):  # --sbatch account=cs336: any other #SBATCH option, as Slurm spells it
        ex.update_parameters(slurm_additional_parameters=dict(kv.split("=", 1) for kv in options["sbatch"]))
    return ex


def launch(store: Store, names: list[str], shards: int, parallelism: int, kind: str) -> str:
    """Shard ``names``, submit one array (one task per shard), record it; print the job id and the logs."""
    from scripts.grading.cluster.task import GradeShard

    config = store.config
    export = Path(config["export"])
    budgets = part_budgets(config["grader_args"])
    tasks = plan_shards({n: cost(export / n, budgets) for n in names}, shards)
    jobs = executor(store, config["options"], parallelism).map_array(
        GradeShard(), [str(store.root)] * len(tasks), tasks
    )
    array = jobs[0].job_id.split("_")[0]
    store.add_array(array, [job.job_id for job in jobs], tasks, kind)
    print(f"submitted job array {array}: {len(tasks)} tasks over {len(names)} submissions ({kind})")
    for k, (job, shard) in enumerate(zip(jobs, tasks)):
        print(f"  task {k}: {len(shard)} submissions, log {job.paths.stdout}")
    print(f"follow it: python -m scripts.grading.cluster status {store.root}")
    return array


def submit(args) -> int:
    grader_args = args.grader_args
    bad = [a for a in grader_args if a.split("=")[0] in BATCH_ONLY]
    if bad:
        raise SystemExit(f"grader args {bad}: the cluster grader sets these itself (results go to --results-dir)")
    if any("=" not in kv for kv in args.sbatch):
        raise SystemExit(f"--sbatch {args.sbatch}: each is KEY=VALUE (account=cs336)")
    store = Store(args.results_dir)
    names = [p.name for p in export_submissions(args.export)]
    if not names:
        raise SystemExit(f"{args.export}: no submission (zip or folder) to grade")
    options = {"cluster": args.cluster, "partition": args.partition, "gpus_per_node": args.gpus_per_node,
               "cpus_per_task": args.cpus_per_task, "time_min": args.time, "sbatch": args.sbatch}  # fmt: skip
    store.root.mkdir(parents=True, exist_ok=True)
    store.save_config({"export": str(args.export.resolve()), "grader_args": grader_args, "options": options,
                       "grader_version": grader_version(grader_args)})  # fmt: skip
    busy = queued_names(store)  # a second submit into the same folder: what an earlier array still holds
    todo = [n for n in names if not store.done(n) and n not in busy]
    if len(todo) < len(names):
        print(f"{len(names) - len(todo)} submissions already graded by this grader version, or still queued: "
              "not submitted again")  # fmt: skip
    if not todo:
        return 0
    if args.array_parallelism:  # one task per submission, at most M at a time: a lost task loses one grade
        launch(store, todo, len(todo), args.array_parallelism, "submit")
    else:
        launch(store, todo, args.nodes, args.nodes, "submit")
    return 0


def resubmit(args) -> int:
    store = Store(args.results)
    config = store.config
    names = [p.name for p in export_submissions(Path(config["export"]))]
    busy, graded = queued_names(store), {n for n in names if store.done(n)}
    waiting = [n for n in names if n in busy and n not in graded]
    todo = [n for n in names if n not in busy and n not in graded]
    print(f"{len(graded)} graded, {len(waiting)} queued or running (left to their tasks), {len(todo)} to resubmit")
    if todo:
        launch(store, todo, args.nodes, args.nodes, "resubmit")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("submit", help="shard an export and submit one job array")
    s.add_argument("export", type=Path, help="the submissions (Gradescope's export, unzipped): zips and folders")
    s.add_argument("--results-dir", type=Path, required=True, help="R: on a file system every node shares")
    size = s.add_mutually_exclusive_group()
    size.add_argument(
        "--nodes",
        type=int,
        default=4,
        help="N tasks (shards), one node each, all at once (default 4); options after -- go to the grader",
    )
    size.add_argument("--array-parallelism", type=int, help="one task per submission instead, M running at a time")
    s.add_argument("--partition", help="Slurm partition of the GPU nodes (sinfo lists them)")
    s.add_argument("--gpus-per-node", type=int, help="GPUs each task asks for (8 for the graders' world sizes 2,4,8)")
    s.add_argument("--cpus-per-task", type=int, help="CPUs each task asks for (default: Slurm's)")
    s.add_argument("--time", type=minutes, default=360, help="each task's time limit: the shard's grades and "
                   "their worst case (Slurm's formats, default 6:00:00)")  # fmt: skip
    s.add_argument("--sbatch", action="append", default=[], metavar="KEY=VALUE",
                   help="another sbatch option (account=cs336, qos=high); repeat for more")  # fmt: skip
    s.add_argument("--cluster", choices=["slurm", "local"], default="slurm", help="local: submitit's local executor")
    r = sub.add_parser("resubmit", help="submit again what has no result")
    r.add_argument("results", type=Path)
    r.add_argument("--missing", action="store_true", required=True, help="only submissions without a result")
    r.add_argument("--nodes", type=int, default=1, help="tasks (shards) for them (default 1)")
    t = sub.add_parser("status", help="per task and per submission: graded / running / pending / failed")
    t.add_argument("results", type=Path)
    c = sub.add_parser("collect", help="the CSV, the dashboard and R ready for gpu_results pack")
    c.add_argument("results", type=Path)
    c.add_argument("--csv", type=Path, help="where the CSV goes (default R/grades.csv)")
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)  # after "--": the grader's options, as they are
    args = p.parse_args(argv[:split])
    args.grader_args = argv[split + 1 :]
    if args.cmd == "submit":
        return submit(args)
    if args.cmd == "resubmit":
        return resubmit(args)
    if args.cmd == "status":
        return print_status(Store(args.results))
    return collect(Store(args.results), args.csv)


if __name__ == "__main__":
    sys.exit(main())
