"""Consumer-lag and rebalance-rate monitor for Kafka consumer groups.

Written after INC-2291 (action item DATA-1469): alert not only on absolute
lag but on the *rate of rebalances*, which is what actually went wrong
(ERR_CONSUMER_REBALANCE_TIMEOUT loop on etl-orders-sink).

Run as a sidecar: ``python kafka_lag_monitor.py --group etl-orders-sink --topic orders.v3``
It exposes Prometheus metrics on :9308.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections import deque
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import Counter, Gauge, start_http_server

log = logging.getLogger("lag-monitor")

LAG = Gauge("kafka_consumer_lag", "Messages behind the high watermark", ["group", "topic", "partition"])
LAG_TOTAL = Gauge("kafka_consumer_lag_total", "Sum of lag over partitions", ["group", "topic"])
GENERATION = Gauge("kafka_consumer_group_generation", "Group generation id", ["group"])
REBALANCES = Counter("kafka_consumer_group_rebalances_total", "Observed generation changes", ["group"])


@dataclass
class RebalanceTracker:
    """Counts generation changes within a sliding window.

    Args:
        window_s: window length in seconds (default 10 min).
        threshold: rebalances in the window that count as a storm.
    """

    window_s: float = 600.0
    threshold: int = 3
    _events: deque[float] = field(default_factory=deque)
    _last_generation: int | None = None

    def observe(self, generation: int, now: float | None = None) -> bool:
        """Record the current generation; return True if we're in a rebalance storm."""
        now = time.time() if now is None else now
        if self._last_generation is not None and generation != self._last_generation:
            self._events.append(now)
        self._last_generation = generation
        while self._events and now - self._events[0] > self.window_s:
            self._events.popleft()
        return len(self._events) >= self.threshold

    @property
    def recent(self) -> int:
        return len(self._events)


def partition_lag(consumer: Consumer, group: str, topic: str) -> dict[int, int]:
    """Lag per partition = high watermark − committed offset (−1 committed counts as full lag)."""
    md = consumer.list_topics(topic, timeout=10)
    partitions = [TopicPartition(topic, p) for p in md.topics[topic].partitions]
    committed = consumer.committed(partitions, timeout=10)
    lags: dict[int, int] = {}
    for tp in committed:
        low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        offset = tp.offset if tp.offset >= 0 else low
        lags[tp.partition] = max(0, high - offset)
    return lags


def group_generation(admin: AdminClient, group: str) -> int | None:
    """Best-effort generation id; not all broker versions expose it via describe."""
    fut = admin.describe_consumer_groups([group])[group]
    desc = fut.result(timeout=10)
    return getattr(desc, "generation_id", None) or getattr(desc, "generation", None)


def run(bootstrap: str, group: str, topic: str, interval: float, port: int) -> None:
    start_http_server(port)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group}-lag-monitor",
                         "enable.auto.commit": False})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tracker = RebalanceTracker()
    # NB: we read committed offsets of `group`, not our own group id.
    consumer_for_group = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                   "enable.auto.commit": False})
    while True:
        try:
            lags = partition_lag(consumer_for_group, group, topic)
            for p, lag in lags.items():
                LAG.labels(group, topic, str(p)).set(lag)
            LAG_TOTAL.labels(group, topic).set(sum(lags.values()))
            gen = group_generation(admin, group)
            if gen is not None:
                before = tracker.recent
                storm = tracker.observe(gen)
                GENERATION.labels(group).set(gen)
                if tracker.recent > before:
                    REBALANCES.labels(group).inc()
                if storm:
                    log.error("rebalance storm on %s: %d generation changes in %.0fs (gen=%s)",
                              group, tracker.recent, tracker.window_s, gen)
        except Exception:  # keep the sidecar alive; metrics go stale and the staleness alert fires
            log.exception("lag poll failed")
        time.sleep(interval)
    consumer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="kafka-b1.internal:9092,kafka-b2.internal:9092")
    ap.add_argument("--group", default="etl-orders-sink")
    ap.add_argument("--topic", default="orders.v3")
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--port", type=int, default=9308)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    run(args.bootstrap, args.group, args.topic, args.interval, args.port)


if __name__ == "__main__":
    main()
