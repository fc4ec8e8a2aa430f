"""The workload generator: the papers' shapes, determinism, the landing layout."""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jobs.common.storage import Storage
from jobs.workloads.generate import PROFILES, Population, generate, scaled, zipf_values

D = dt.date(2026, 1, 1)


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def test_zipf_values_have_the_mean_and_the_skew():
    rng = np.random.default_rng(0)
    v = zipf_values(10_000, 0.62, 5.8, rng)
    assert v.mean() == pytest.approx(5.8)
    ranked = np.sort(v)[::-1]
    # value of rank i is proportional to i**-s: the log-log slope is -s
    slope = np.polyfit(np.log(np.arange(1, 10_001)), np.log(ranked), 1)[0]
    assert slope == pytest.approx(-0.62, abs=1e-9)


def test_ff2010_shape_at_a_small_scale(tmp_path):
    profile = scaled(PROFILES["ff2010"], 0.02)  # 4,000 consumers, 1,358 producers
    assert (profile.consumers, profile.producers) == (4000, 1358)
    stats = generate(Storage.at(str(tmp_path)), D, 2, profile, seed=5)
    follows = pd.read_csv(next((tmp_path / "follows" / f"ds={D}").iterdir()), dtype=str)
    fan_in = follows.groupby("consumer_id").size()
    fan_out = follows.groupby("producer_id").size()
    # Table 2: 5.1 producers per consumer; a few percent of draws are repeats and are dropped
    assert 4.7 < len(follows) / profile.consumers < 5.2
    assert len(follows) / profile.producers == pytest.approx(15.0, rel=0.1)  # ~15 per producer
    assert fan_out.max() > 5 * fan_out.median()  # skewed fan-out
    assert (follows["consumer_id"] != follows["producer_id"]).all()
    assert not follows.duplicated(["consumer_id", "producer_id"]).any()
    assert fan_in.max() > 3 * fan_in.median()
    ev = pd.read_parquet(tmp_path / "events" / f"ds={D}")
    views = pd.read_parquet(tmp_path / "views" / f"ds={D}")
    # 1 event/hour per producer and 5.8 views/hour per consumer on average, Poisson per day
    assert len(ev) / (24 * profile.producers) == pytest.approx(1.0, rel=0.05)
    assert len(views) / (24 * profile.consumers) == pytest.approx(5.8, rel=0.05)
    assert ev["event_id"].is_unique
    day_start = pd.Timestamp(D, tz="UTC")
    assert ev["created_at"].between(day_start, day_start + pd.Timedelta(days=1)).all()
    changes = pd.read_csv(
        next((tmp_path / "follows" / f"ds={D + dt.timedelta(days=1)}").iterdir()), dtype=str
    )
    assert set(changes["op"]) == {"follow", "unfollow"}
    assert stats[1].follow_rows == len(changes)


def test_same_seed_same_files_other_seed_other_files(tmp_path):
    profile = scaled(PROFILES["cz2015"], 0.02)
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        generate(Storage.at(str(tmp_path / name)), D, 2, profile, seed=seed)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    assert digest(tmp_path / "a") != digest(tmp_path / "c")


def test_cz2015_rates_follow_table_i():
    pop = Population.draw(PROFILES["cz2015"], seed=1)
    # 0.1 events and 0.5 queries per 6-minute interval
    assert pop.event_rate.mean() == pytest.approx(1.0)
    assert pop.view_rate.mean() == pytest.approx(5.0)
    assert pop.fan_in.mean() == pytest.approx(6.5)


def test_capped_zipf_keeps_the_mean_below_the_cap():
    rng = np.random.default_rng(0)
    v = zipf_values(5_000, 0.98, 137.1, rng, cap=3_000)
    assert v.max() <= 3_000 + 1e-9
    assert v.mean() == pytest.approx(137.1)
    # uncapped values keep their Zipf ratios: the two largest below the cap
    s = np.sort(v[v < 3_000 - 1e-6])[::-1]
    free = zipf_values(5_000, 0.98, 137.1, np.random.default_rng(0))
    f = np.sort(free)[::-1]
    i = int((v >= 3_000 - 1e-6).sum())
    assert s[0] / s[1] == pytest.approx(f[i] / f[i + 1])
    # a cap above every value changes nothing
    assert np.array_equal(
        zipf_values(500, 0.62, 5.1, np.random.default_rng(1), cap=1e9),
        zipf_values(500, 0.62, 5.1, np.random.default_rng(1)),
    )


def test_filled_degrees_reach_their_targets_under_heavy_skew():
    """The Google+ shape draws most follows from a few producers; redrawing repeated draws
    brings consumers close to their degrees, where plain draws lose most of them."""
    prof = scaled(PROFILES["gplus"], 0.02)  # 1,994 consumers, 1,445 producers
    pop = Population.draw(prof, 3)
    cons = np.arange(prof.consumers)
    deg = np.clip(np.round(pop.fan_in).astype(np.int64), 1, prof.producers - 1)
    plain = pop.draw_edges(cons, deg, np.random.default_rng(5))
    filled = pop.draw_edges(cons, deg, np.random.default_rng(5), fill=True)
    assert plain.size < 0.7 * deg.sum() < 0.85 * deg.sum() < filled.size <= deg.sum()
    assert np.unique(filled).size == filled.size
    assert not np.any(filled // prof.producers == filled % prof.producers)  # no self-follows


def test_topics_through_the_command_line_are_deterministic_and_well_formed(tmp_path):
    """``feedpipe generate --topics``: every event has the attributes, the topics parse and
    cover the five kinds, their followers join day 1's snapshot, and the same seed gives the
    same files while the other columns stay as without topics."""
    from jobs.cli import main
    from jobs.common.predicates import parse

    def run(name: str, *extra: str) -> Path:
        out = tmp_path / name
        args = ["generate", "--out", str(out), "--start", str(D), "--days", "2"]
        assert main([*args, "--profile", "cz2015", "--scale", "0.01", *extra]) == 0
        return out

    a, b = run("a", "--topics", "200"), run("b", "--topics", "200")
    plain = run("plain")
    assert digest(a) == digest(b)
    topics = pd.read_csv(next((a / "topics" / f"ds={D}").iterdir()), dtype=str)
    assert len(topics) == 200 and topics["topic_id"].is_unique
    terms = [parse(p) for p in topics["predicate"]]  # every definition parses
    kinds = {
        "one tag": sum(len(t) == 1 and t[0].op == "=" and t[0].attribute == "tag" for t in terms),
        "in list": sum(len(t) == 1 and t[0].op == "in" for t in terms),
        "range": sum(any(x.op in (">=", "<") for x in t) for t in terms),
        "not equal": sum(any(x.op == "!=" for x in t) for t in terms),
        "tag and region": sum([x.attribute for x in t] == ["tag", "region"] for t in terms),
        "category": sum(t[0].attribute == "category" for t in terms),
    }
    assert kinds["category"] == 24 and min(kinds.values()) >= 5, kinds
    follows = pd.concat(pd.read_csv(p, dtype=str) for p in (a / "follows" / f"ds={D}").iterdir())
    on_topics = follows[follows["producer_id"].isin(set(topics["topic_id"]))]
    assert len(on_topics) > 200 and on_topics["consumer_id"].str.startswith("u").all()
    for day in (D, D + dt.timedelta(days=1)):
        events = pd.read_parquet(next((a / "events" / f"ds={day}").iterdir()))
        attrs = [dict(m) for m in events["attributes"]]
        assert all({"category", "region", "tag", "score"} <= set(x) for x in attrs)
        assert 0.05 < sum("language" not in x for x in attrs) / len(attrs) < 0.15
        same = pd.read_parquet(next((plain / "events" / f"ds={day}").iterdir()))
        pd.testing.assert_frame_equal(events.drop(columns="attributes"), same)
    assert not (plain / "topics").exists()


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_landing_writer_that_fails_leaves_no_file_and_one_that_ends_a_whole_one(tmp_path, fmt):
    """``LandingWriter`` as a context manager: its file is closed when the block ends (read
    back whole, in its format) and removed when the block raises (nothing half-written for
    ``ingest`` to find)."""
    import pyarrow as pa

    from jobs.workloads.landing import LandingWriter
    from support import naive

    day = dt.date(2026, 3, 1)
    rows = pa.table({"consumer_id": ["u1", "u2"], "producer_id": ["p1", "p2"]})
    storage = Storage.at(str(tmp_path))
    with pytest.raises(RuntimeError, match="upstream broke"):
        with LandingWriter(storage, "follows", day, fmt, gzip_text=True) as w:
            w.write(rows)
            raise RuntimeError("upstream broke")
    assert list((tmp_path / "follows" / f"ds={day}").iterdir()) == []
    with LandingWriter(storage, "follows", day, fmt, gzip_text=True) as w:
        w.write(rows)
        w.write(rows)
    (written,) = (tmp_path / "follows" / f"ds={day}").iterdir()
    back = naive.read_table(tmp_path, "follows", day)
    assert written.name.endswith({"parquet": ".parquet"}.get(fmt, f".{fmt}.gz"))
    assert list(back["consumer_id"]) == ["u1", "u2", "u1", "u2"]
