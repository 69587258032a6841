"""Grading a class on a Slurm cluster through submitit: one job array, one node per task (staff only).

    python -m scripts.grading.cluster submit EXPORT --results-dir R --nodes 8 --partition gpu --gpus-per-node 8 \\
        --time 4:00:00 -- --backend nccl --world-sizes 2,4,8 --deadline 60

The guide is handouts/grading.md, "Grading on a cluster". One file per idea:

    __main__.py     the commands: submit, status, resubmit --missing, collect
    shards.py       the export split into shards balanced by what each grade can cost (pure, deterministic)
    task.py         what an array task runs: its shard, each submission through ``--batch``, skipping what counts
    store.py        the results folder: what counts as graded (fingerprint and grader version), atomic moves
    slurm.py        task states from sacct (or squeue), and the status report
    collect.py      the one-node batch's CSV and dashboard from R
    local_slurm.py  a one-node Slurm on this machine, for the tests and CI
"""
