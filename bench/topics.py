"""Topic matching throughput: a day's events against many topics (docs/topics.md, "Matching at
scale"), by access predicate in Spark (what ``ingest`` runs) beside a brute-force cross join
in Spark and the same access-predicate plan in DuckDB.

    python -m bench.topics [--events 100000,1000000] [--topics 10000,100000,1000000] \
        [--brute-pairs 1e9] [--duckdb-pairs 1e12] [--seed 7]

Events carry the generator's attributes and the topics are its mix (``feedpipe generate
--topics N``: ``jobs.workloads.generate.Vocabulary`` and ``topic_table``), so an event meets
about 30 topics whatever their number. For each size: the Spark matcher's time from the
Parquet files to the matches written as Parquet (parsing included), its candidate pairs (what
the access predicates find) and matches; the brute force (every topic checked on every event)
where events x topics is at most ``--brute-pairs``; DuckDB's time for the same plan in SQL
(parsing in Python included) where at most ``--duckdb-pairs``. Both references must find the
same number of matches. Writes ``bench/results/topics_<events>x<topics>.json`` per size and
prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench import provenance
from jobs.workloads.generate import PROFILES, Vocabulary, topic_table

RESULTS = Path(__file__).parent / "results"


def workload(folder: Path, n_events: int, n_topics: int, seed: int) -> tuple[Path, Path]:
    """The events (``event_id, attributes``) and topics (``topic_id, predicate``) as Parquet."""
    import dataclasses

    profile = dataclasses.replace(PROFILES["cz2015"], topics=n_topics)
    vocab = Vocabulary.of(profile)
    assert vocab is not None
    rng = np.random.default_rng([seed, 1])
    ev = folder / "events"
    ev.mkdir(parents=True)
    block = 200_000
    for i, lo in enumerate(range(0, n_events, block)):
        n = min(block, n_events - lo)
        ids = pa.array([f"ev{j:08d}" for j in range(lo, lo + n)])
        attrs = vocab.attributes(n, rng, as_map=True)
        pq.write_table(
            pa.table({"event_id": ids, "attributes": attrs}), ev / f"part-{i:04d}.parquet"
        )
    tp = folder / "topics.parquet"
    pq.write_table(topic_table(profile, vocab, seed), tp)
    return ev, tp


def spark_matcher(spark, ev: Path, tp: Path, out: Path) -> dict[str, Any]:
    from pyspark import StorageLevel

    from jobs.stages.topics import candidates, match, parse_topics

    events = spark.read.parquet(str(ev))
    t0 = time.perf_counter()
    # parsed once and kept, as ``ingest`` keeps the day's tagged definitions
    parsed = parse_topics(spark.read.parquet(str(tp))).persist(StorageLevel.MEMORY_AND_DISK)
    match(events, parsed).write.mode("overwrite").parquet(str(out / "matches"))
    seconds = time.perf_counter() - t0
    matches = pq.ParquetDataset(out / "matches").read().num_rows
    n_candidates = candidates(events, parsed).count()
    parsed.unpersist()
    return {"seconds": seconds, "candidates": n_candidates, "matches": matches}


def spark_brute(spark, ev: Path, tp: Path) -> dict[str, Any]:
    from jobs.stages.topics import brute_force, parse_topics

    t0 = time.perf_counter()
    n = brute_force(spark.read.parquet(str(ev)), parse_topics(spark.read.parquet(str(tp)))).count()
    return {"seconds": time.perf_counter() - t0, "matches": n}


NUMBER = r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"


def duckdb_matcher(ev: Path, tp: Path) -> dict[str, Any]:
    """The access-predicate plan of ``jobs.stages.topics.match`` in DuckDB SQL: the rarest
    equality term's (attribute, value) keys joined with the events', an ordering term's
    attribute for topics without one, every event for ``!=``-only topics, then every term
    checked on the candidates (grouped per pair). The access keys are materialized before
    they meet the events' keys: left to itself, DuckDB joined every equality term with the
    events first (``region = eu`` of 200,000 topics with a third of the events) and spilled
    some 70 GB at 100,000 events x 1M topics."""
    import duckdb

    from jobs.common.predicates import Malformed, parse

    t0 = time.perf_counter()
    rows: dict[str, list] = {k: [] for k in ("topic_id", "pos", "attribute", "op", "texts", "nums")}
    for topic_id, predicate in zip(
        *pq.read_table(tp).to_pydict().values(), strict=True
    ):  # topic_id, predicate
        try:
            terms = parse(predicate)
        except Malformed:
            continue
        for pos, t in enumerate(terms):
            rows["topic_id"].append(topic_id)
            rows["pos"].append(pos)
            rows["attribute"].append(t.attribute)
            rows["op"].append(t.op)
            rows["texts"].append([v.text for v in t.values])
            rows["nums"].append([v.number for v in t.values])
    con = duckdb.connect()
    # beside a Spark driver on the same machine: spill to disk past 6 GB
    spill = tempfile.mkdtemp(prefix="bench-topics-duckdb-")
    con.execute(f"SET threads = 2; SET memory_limit = '6GB'; SET temp_directory = '{spill}'")
    con.execute(f"CREATE TABLE ev AS SELECT * FROM read_parquet('{ev}/*.parquet')")
    con.register("terms_table", pa.table(rows))
    con.execute("CREATE TABLE terms AS SELECT * FROM terms_table")
    # a number's key: its double as text, -0.0 as 0.0 (as jobs.stages.topics._key)
    con.execute(
        "CREATE MACRO numkey(x) AS 'n:' || CAST(CASE WHEN x = 0 THEN 0.0 ELSE x END AS VARCHAR)"
    )
    sql = f"""
    WITH pairs AS (
        SELECT event_id, unnest(map_keys(attributes)) AS attribute,
               unnest(map_values(attributes)) AS value FROM ev),
    ek AS (
        SELECT event_id, attribute, 's:' || value AS key FROM pairs
        UNION ALL
        SELECT event_id, attribute, numkey(TRY_CAST(value AS DOUBLE))
        FROM pairs WHERE regexp_full_match(value, '{NUMBER}')),
    eq AS (
        SELECT DISTINCT topic_id, pos, attribute,
               CASE WHEN n IS NULL THEN 's:' || t ELSE numkey(n) END AS key
        FROM (SELECT topic_id, pos, attribute, unnest(texts) AS t, unnest(nums) AS n
              FROM terms WHERE op IN ('=', 'in'))),
    freq AS (SELECT attribute, key, count(*) AS n FROM ek GROUP BY ALL),
    weight AS (
        SELECT topic_id, pos, sum(coalesce(n, 0)) AS n
        FROM eq LEFT JOIN freq USING (attribute, key) GROUP BY ALL),
    best AS (SELECT topic_id, arg_min(pos, (n, pos)) AS pos FROM weight GROUP BY topic_id),
    access AS MATERIALIZED (
        SELECT e.topic_id, e.attribute, e.key FROM eq e JOIN best b USING (topic_id, pos)),
    by_eq AS (SELECT a.topic_id, k.event_id FROM access a JOIN ek k USING (attribute, key)),
    rest AS (
        SELECT topic_id, min(CASE WHEN op IN ('<', '<=', '>', '>=') THEN attribute END) AS a
        FROM terms WHERE topic_id NOT IN (SELECT topic_id FROM best) GROUP BY topic_id),
    by_attr AS (
        SELECT r.topic_id, p.event_id FROM rest r JOIN pairs p ON p.attribute = r.a),
    by_all AS (SELECT r.topic_id, e.event_id FROM rest r, ev e WHERE r.a IS NULL),
    cand AS (SELECT * FROM by_eq UNION SELECT * FROM by_attr UNION SELECT * FROM by_all),
    checked AS (
        SELECT c.topic_id, c.event_id,
               map_extract_value(e.attributes, t.attribute) AS a, t.op, t.texts, t.nums
        FROM cand c JOIN terms t USING (topic_id) JOIN ev e USING (event_id)),
    holds AS (
        SELECT topic_id, event_id,
          CASE WHEN a IS NULL THEN op = '!='
               ELSE list_bool_or(list_transform(
                 list_zip(texts, nums), v -> CASE
                   WHEN v[2] IS NULL THEN CASE
                     WHEN op IN ('=', 'in') THEN a = v[1]
                     WHEN op = '!=' THEN a <> v[1] WHEN op = '<' THEN a < v[1]
                     WHEN op = '<=' THEN a <= v[1] WHEN op = '>' THEN a > v[1]
                     ELSE a >= v[1] END
                   ELSE regexp_full_match(a, '{NUMBER}') AND CASE
                     WHEN op IN ('=', 'in') THEN TRY_CAST(a AS DOUBLE) = v[2]
                     WHEN op = '!=' THEN TRY_CAST(a AS DOUBLE) <> v[2]
                     WHEN op = '<' THEN TRY_CAST(a AS DOUBLE) < v[2]
                     WHEN op = '<=' THEN TRY_CAST(a AS DOUBLE) <= v[2]
                     WHEN op = '>' THEN TRY_CAST(a AS DOUBLE) > v[2]
                     ELSE TRY_CAST(a AS DOUBLE) >= v[2] END END)) END AS ok
        FROM checked)
    SELECT count(*) FROM (SELECT topic_id, event_id FROM holds GROUP BY ALL HAVING bool_and(ok))
    """
    try:
        row = con.execute(sql).fetchone()
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)
    assert row is not None
    return {"seconds": time.perf_counter() - t0, "matches": int(row[0])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", default="100000,1000000")
    ap.add_argument("--topics", default="10000,100000,1000000")
    ap.add_argument("--brute-pairs", type=float, default=1e9)
    ap.add_argument("--duckdb-pairs", type=float, default=1e12)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    from jobs.common.config import Settings
    from jobs.common.spark import build_session

    spark = build_session(
        Settings(spark_master="local[2]", shuffle_partitions=8), "feedpipe-bench-topics"
    )
    RESULTS.mkdir(exist_ok=True)
    print(
        "| events | topics | Spark matcher (s) | pairs/s | candidates | matches | per event |"
        " brute force (s) | DuckDB (s) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n_events in (int(x) for x in args.events.split(",")):
        for n_topics in (int(x) for x in args.topics.split(",")):
            folder = Path(tempfile.mkdtemp(prefix="bench-topics-"))
            try:
                ev, tp = workload(folder, n_events, n_topics, args.seed)
                result: dict[str, Any] = {"events": n_events, "topics": n_topics}
                result["spark"] = spark_matcher(spark, ev, tp, folder)
                print(f"  {n_events:,} x {n_topics:,}: Spark {result['spark']}", flush=True)
                pairs = n_events * n_topics
                if pairs <= args.brute_pairs:
                    result["brute_force"] = spark_brute(spark, ev, tp)
                    assert result["brute_force"]["matches"] == result["spark"]["matches"]
                if pairs <= args.duckdb_pairs:
                    result["duckdb"] = duckdb_matcher(ev, tp)
                    assert result["duckdb"]["matches"] == result["spark"]["matches"]
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            s = result["spark"]
            result["pairs_per_second"] = pairs / s["seconds"]
            result["matches_per_event"] = s["matches"] / n_events
            result.update(provenance(vars(args)))
            name = f"topics_{n_events}x{n_topics}.json"
            (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")

            brute, duck = (
                f"{result[k]['seconds']:.1f}" if k in result else "not run"
                for k in ("brute_force", "duckdb")
            )

            print(
                f"| {n_events:,} | {n_topics:,} | {s['seconds']:.1f} | {pairs / s['seconds']:.3g}"
                f" | {s['candidates']:,} | {s['matches']:,} | {s['matches'] / n_events:.1f}"
                f" | {brute} | {duck} |",
                flush=True,
            )
    spark.stop()


if __name__ == "__main__":
    main()
