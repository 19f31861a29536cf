"""Which records should the cost model learn from? Leave one workload out, per sampling rule.

For each workload W with at least 4 successful records in the database: train the cost model on
the other workloads' records, sampled per workload by a rule (``RecordRepository.sample_records``),
predict W's records and score
- pairwise accuracy: the share of W's record pairs (times more than 2% apart) whose predicted
  order matches the measured one;
- top-1 regret: measured time of the record the model ranks first / W's best (geometric mean).

    python bench/sampling_eval.py sqlite:///data/convtune.db
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
import tvm
from sqlalchemy import select
from sqlalchemy.orm import Session

from convtune.db.models import TargetRow, TuningRecordRow
from convtune.db.ms_database import SQLDatabase
from convtune.db.session import make_engine
from convtune.tuner.search.cost_model import CostModelStore, fit, new_model

RULES = {"top4": (4, 0), "random8": (0, 8), "top4+random8": (4, 8), "all": (10**6, 0)}


def evaluate(database: SQLDatabase, top_k: int, random_k: int) -> tuple[float, float, float]:
    """(mean training records, pairwise accuracy, geometric-mean top-1 regret) of one rule."""
    store = CostModelStore(database, threads=1)
    by_workload: dict[int, list[TuningRecordRow]] = {}
    for row in database.records.sample_records(top_k=10**6, random_k=0):
        by_workload.setdefault(row.workload_id, []).append(row)
    sample = database.records.sample_records(top_k=top_k, random_k=random_k)
    sizes, accuracies, regrets = [], [], []
    for held, rows in by_workload.items():
        if len(rows) < 4:
            continue
        train = [r for r in sample if r.workload_id != held]
        model = new_model(seed=0, threads=1)
        model.num_warmup_samples = 0
        store.add_records(model, train)
        fit(model)
        sizes.append(len(train))
        candidates = [database.records.tuning_record(r).as_measure_candidate() for r in rows]
        predicted = model.predict(store.context(held), candidates)
        secs = np.array([r.mean_sec for r in rows])
        pairs = [
            (i, j)
            for i, j in itertools.combinations(range(len(rows)), 2)
            if abs(secs[i] - secs[j]) > 0.02 * min(secs[i], secs[j])
        ]
        if pairs:
            right = sum((predicted[i] > predicted[j]) == (secs[i] < secs[j]) for i, j in pairs)
            accuracies.append(right / len(pairs))
        regrets.append(secs[int(np.argmax(predicted))] / secs.min())
    return float(np.mean(sizes)), float(np.mean(accuracies)), float(np.exp(np.log(regrets).mean()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("db", help="Database URL with tuning records.")
    args = parser.parse_args()
    engine = make_engine(args.db)
    with Session(engine) as session:
        spec = session.scalars(select(TargetRow.spec)).first()
    database = SQLDatabase(engine, tvm.target.Target(spec))
    for name, (top_k, random_k) in RULES.items():
        start = time.perf_counter()
        size, accuracy, regret = evaluate(database, top_k, random_k)
        print(
            f"{name:14s} train records {size:6.0f}  pairwise accuracy {accuracy:.3f}  "
            f"top-1 regret {regret:.3f}  ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
