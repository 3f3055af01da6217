"""The built-in loggers keep every row, whatever order metrics first appear in."""

from __future__ import annotations

import csv

from hypothesis import given, settings
from hypothesis import strategies as st

from rlplug.plugins.loggers.builtin import CSVLogger

metric_names = st.sampled_from(["fps", "loss", "eval_return_mean", "kl"])
rows = st.lists(st.dictionaries(metric_names, st.floats(-1e6, 1e6, allow_nan=False), min_size=1), min_size=1,
                max_size=12)


@settings(max_examples=40, deadline=None)
@given(rows=rows)
def test_csv_keeps_every_row_and_every_column(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("csv") / "metrics.csv"
    logger = CSVLogger(path)
    for frames, row in enumerate(rows):
        logger.log(row, frames)
        with path.open() as f:  # flushed at once: readable while the run goes on
            assert len(list(csv.DictReader(f))) == frames + 1
    logger.close({})
    with path.open() as f:
        read = list(csv.DictReader(f))
    assert [int(r["frames"]) for r in read] == list(range(len(rows)))
    for written, back in zip(rows, read):
        assert {k: float(v) for k, v in back.items() if v and k != "frames"} == written


def test_csv_continues_a_file_it_finds(tmp_path):
    path = tmp_path / "metrics.csv"
    first = CSVLogger(path)
    first.log({"fps": 1.0}, 1)
    first.close({})
    second = CSVLogger(path, start_frames=1)  # the same run, trained on (Agent.train again)
    second.log({"fps": 2.0, "kl": 0.5}, 2)
    second.close({})
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["frames"], r["fps"], r["kl"]) for r in rows] == [("1", "1.0", ""), ("2", "2.0", "0.5")]


def test_csv_drops_rows_logged_after_the_checkpoint_a_run_resumes_from(tmp_path):
    path = tmp_path / "metrics.csv"
    killed = CSVLogger(path)
    for frames in (100, 200, 300):  # checkpoint at 200, killed after logging 300
        killed.log({"fps": float(frames)}, frames)
    resumed = CSVLogger(path, start_frames=200)
    resumed.log({"fps": 301.0}, 300)
    resumed.close({})
    with path.open() as f:
        assert [(r["frames"], r["fps"]) for r in csv.DictReader(f)] == [("100", "100.0"), ("200", "200.0"),
                                                                       ("300", "301.0")]
