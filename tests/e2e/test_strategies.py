"""Every strategy's served feeds, on the days the stage tier builds: the churn days (edges
moving between push and pull, global and per-producer coherency) and the topic days (events
reaching a consumer through their author and a topic). The stage tier serves the default
strategies' two kinds of plan (``support.workloads.STAGE_TIER``, tests/stages/test_plan.py and
tests/stages/test_topics.py); these are the others, checked the same way
(``support.strategies``).
"""

from __future__ import annotations

import pytest

from support.strategies import check_plan_feeds, check_topic_feeds
from support.workloads import OTHER_SERVED


@pytest.mark.parametrize("strategy", OTHER_SERVED)
def test_assembled_feed_equals_the_naive_answer(
    spark, churn_landing, built_copy, redis_server, strategy
):
    check_plan_feeds(spark, churn_landing, built_copy, strategy, redis_server.url)


@pytest.mark.parametrize("strategy", OTHER_SERVED)
def test_assembled_feeds_with_topics_equal_the_naive_answer(spark, topics_copy, strategy):
    check_topic_feeds(spark, topics_copy, strategy)
