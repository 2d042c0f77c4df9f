"""The generated scenario: every topic written ``variants`` times, and questions of each kind."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbmemory.errors import ConfigError
from nbmemory.eval.scenario.world import (
    CONVENTIONS,
    ENVIRONMENTS,
    FAILURES,
    MISSING_PROJECTS,
    MISSING_QUESTIONS,
    MISSING_SERVICES,
    MONTHS,
    PREFERENCES,
    PROCEDURES,
    PROJECTS,
    SERVICES,
    substitute,
)

# -- the generated scenario --------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryItem:
    """One stored text: a variant of a topic."""

    topic: str
    variant: int
    category: str
    text: str
    age_days: float = 0.0
    supersedes: str | None = None

    @property
    def source(self) -> str:
        return f"{self.topic}#v{self.variant}"


@dataclass(frozen=True)
class ScenarioQuery:
    """A question with the topics that answer it (none for a miss)."""

    id: str
    kind: str
    text: str
    targets: tuple[str, ...]


@dataclass
class Scenario:
    """A generated memory and its questions."""

    seed: int
    items: list[MemoryItem]
    queries: list[ScenarioQuery]

    @property
    def topics(self) -> dict[str, str]:
        """Topic id -> category."""
        return {item.topic: item.category for item in self.items}

    def counts(self) -> dict[str, Any]:
        """Items per category and queries per kind."""
        by_category: dict[str, int] = {}
        for item in self.items:
            by_category[item.category] = by_category.get(item.category, 0) + 1
        by_kind: dict[str, int] = {}
        for query in self.queries:
            by_kind[query.kind] = by_kind.get(query.kind, 0) + 1
        return {
            "items": len(self.items),
            "topics": len(self.topics),
            "by_category": by_category,
            "queries": by_kind,
        }


def _variants(
    templates: Sequence[str], values: Mapping[str, str], variants: int, rng: random.Random
) -> list[str]:
    out = []
    for v in range(variants):
        text = templates[v % len(templates)].format(**values)
        if v >= 2:
            # The third and later variants also swap words for synonyms.
            text = substitute(text, rng)
        out.append(text)
    return out


def generate(seed: int = 7, variants: int = 3, queries_per_kind: int = 40) -> Scenario:
    """Generate the scenario: the same ``seed`` always gives the same items and queries.

    Parameters
    ----------
    seed:
        Random seed.
    variants:
        Texts per topic (1 = no paraphrased copies; the benchmark uses 3).
    queries_per_kind:
        Questions of each kind (keyword-exact and paraphrase get 1.5 times as many).

    Returns
    -------
    Scenario
    """
    if variants < 1:
        raise ConfigError(f"variants must be at least 1, got {variants}")
    if queries_per_kind < 1:
        raise ConfigError(f"queries_per_kind must be at least 1, got {queries_per_kind}")
    rng = random.Random(seed)
    items: list[MemoryItem] = []
    # Per topic: (paraphrase question, keyword question or None, procedure question or None)
    asks: dict[str, dict[str, str]] = {}

    def add(topic: str, category: str, texts: list[str], **questions: str) -> None:
        for v, text in enumerate(texts):
            items.append(MemoryItem(topic, v, category, text))
        asks[topic] = questions

    for n, (task, task_ask, choice, alt, reason) in enumerate(PREFERENCES):
        values = {"task": task, "choice": choice, "alt": alt, "reason": reason}
        texts = _variants(
            [
                "For {task} I prefer {choice} over {alt} because {reason}.",
                "Preference: {choice}, not {alt}, for {task} ({reason}).",
                "Note to self: when it comes to {task}, use {choice} rather than {alt}, because {reason}.",
            ],
            values,
            variants,
            rng,
        )
        add(f"pref-{n:02d}", "preference", texts, paraphrase=f"what do I like to use for {task_ask}?")

    tickets = rng.sample(range(1000, 9999), len(SERVICES) * 6)
    number = 0
    for service in sorted(SERVICES):
        for failure in rng.sample(FAILURES, 6):
            symptom, symptom_ask, cause, fix = failure
            ticket = f"INC-{tickets[number]}"
            values = {
                "ticket": ticket,
                "service": service,
                "symptom": symptom,
                "cause": cause,
                "fix": fix,
                "month": rng.choice(MONTHS),
            }
            texts = _variants(
                [
                    "{ticket} ({month}): {service} {symptom}. Root cause: {cause}. Fix: we {fix}.",
                    "Postmortem {ticket}: in {month} {service} {symptom}. What we found: {cause}. We {fix}.",
                    "Incident {ticket}, {month}. The {service} service {symptom}. Cause: {cause}. Resolution: {fix}.",
                ],
                values,
                variants,
                rng,
            )
            add(
                f"inc-{number:02d}",
                "incident",
                texts,
                paraphrase=f"why {service} {symptom_ask}",
                keyword=rng.choice([ticket, f"what happened in {ticket}", f"{ticket} root cause"]),
            )
            number += 1

    runbooks = rng.sample(range(100, 999), len(PROCEDURES) * 6)
    number = 0
    for goal, goal_ask, steps in PROCEDURES:
        combos = [(s, e) for s in sorted(SERVICES) for e in ENVIRONMENTS]
        chosen = rng.sample(combos, 5)
        # A confusable pair: the same service in both environments.
        service = chosen[0][0]
        chosen += [(service, e) for e in ENVIRONMENTS if (service, e) not in chosen]
        chosen = chosen[:6]
        for service, env in chosen:
            values = {"service": service, "env": env}
            filled = [s.format(**values) for s in steps]
            if env == "production":
                filled.insert(0, "announce it in #change-requests and wait for an approval")
            runbook = f"RB-{runbooks[number]}"
            values |= {
                "goal": goal.format(**values),
                "runbook": runbook,
                "steps": ", then ".join(filled),
                "numbered": " ".join(f"{i}. {s}." for i, s in enumerate(filled, start=1)),
                "first": filled[0],
                "rest": ", ".join(filled[1:]),
            }
            texts = _variants(
                [
                    "Runbook {runbook}: to {goal}, {steps}.",
                    "How to {goal} ({runbook}): {numbered}",
                    "{runbook}. When you need to {goal}: first {first}; then {rest}; finally check the dashboards.",
                ],
                values,
                variants,
                rng,
            )
            ask = goal_ask.format(**values)
            add(
                f"proc-{number:02d}",
                "procedure",
                texts,
                procedure=rng.choice(
                    [f"how do I {ask}?", f"steps to {ask}", f"what is the procedure to {ask}?"]
                ),
                keyword=rng.choice([runbook, f"runbook {runbook}"]),
            )
            number += 1

    number = 0
    for project in PROJECTS:
        prefix = project.upper()
        for kind_name, ask, options in CONVENTIONS:
            rule = rng.choice(options).format(prefix=prefix, project=project)
            values = {"project": project, "rule": rule, "kind": kind_name}
            texts = _variants(
                [
                    "In the {project} repo, {rule}.",
                    "{project} convention ({kind}): {rule}.",
                    "Project {project}: remember that {rule}.",
                ],
                values,
                variants,
                rng,
            )
            add(
                f"conv-{number:02d}",
                "convention",
                texts,
                paraphrase=ask.format(project=project),
                keyword=f"{project} {kind_name}",
            )
            number += 1

    queries = _queries(asks, rng, queries_per_kind)
    # Time comes last, from its own generator, so the rest of the scenario is the same with or
    # without it.
    timeline = random.Random(seed * 7919 + 1)
    items = [
        MemoryItem(i.topic, i.variant, i.category, i.text, age_days=timeline.uniform(1, 400)) for i in items
    ]
    updated_items, updated_queries = _updated_facts(timeline, variants)
    return Scenario(seed=seed, items=items + updated_items, queries=queries + updated_queries)


def _updated_facts(
    rng: random.Random, variants: int, n: int = 24
) -> tuple[list[MemoryItem], list[ScenarioQuery]]:
    """Facts stated twice, months apart, with different values; the newer one is the answer."""
    people = ["Priya", "Marek", "Aiko", "Tomás", "Lena", "Kwame", "Sofia", "Jonas", "Mei", "Ravi"]
    days = ["Monday", "Tuesday", "Wednesday", "Thursday"]
    facts: list[tuple[str, str, Callable[[], str]]] = [
        (
            "the staging database is on {value}",
            "where does the {service} staging database live?",
            lambda: f"db-stg-{rng.randint(10, 99)}.internal",
        ),
        (
            "alerts go to the {value} channel",
            "which chat channel gets {service} alerts?",
            lambda: (
                f"#alerts-{rng.choice(['core', 'platform', 'sre', 'data', 'edge', 'payments'])}-{rng.randint(1, 9)}"
            ),
        ),
        ("the on-call owner is {value}", "who is on call for {service}?", lambda: rng.choice(people)),
        (
            "the client library is pinned to {value}",
            "which client library version does {service} pin?",
            lambda: f"v{rng.randint(1, 4)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}",
        ),
        (
            "deploys are allowed on {value}",
            "when am I allowed to deploy {service}?",
            lambda: f"{rng.choice(days)} after {rng.randint(9, 16)}:00",
        ),
    ]
    templates = ["{service}: {fact}.", "Note on {service}: {fact}.", "For the {service} service, {fact}."]
    combos = rng.sample([(svc, f) for svc in sorted(SERVICES) for f in range(len(facts))], n)
    items: list[MemoryItem] = []
    queries: list[ScenarioQuery] = []
    for number, (service, f) in enumerate(combos):
        sentence, ask, value = facts[f]
        old_value = value()
        new_value = value()
        while new_value == old_value:
            new_value = value()
        topic = f"upd-{number:02d}"
        linked = number % 2 == 0
        for version, val, low, high in (("old", old_value, 200, 400), ("new", new_value, 1, 60)):
            fact = sentence.format(value=val)
            name = f"{topic}-old" if version == "old" else topic
            for v in range(variants):
                items.append(
                    MemoryItem(
                        name,
                        v,
                        "updated",
                        templates[v % len(templates)].format(service=service, fact=fact),
                        age_days=rng.uniform(low, high),
                        supersedes=f"{topic}-old" if version == "new" and linked else None,
                    )
                )
        queries.append(ScenarioQuery(f"up-{number:03d}", "updated", ask.format(service=service), (topic,)))
    return items, queries


def _queries(asks: dict[str, dict[str, str]], rng: random.Random, per_kind: int) -> list[ScenarioQuery]:
    out: list[ScenarioQuery] = []

    def pick(kind: str, n: int) -> list[tuple[str, str]]:
        pool = sorted((topic, q[kind]) for topic, q in asks.items() if kind in q)
        return rng.sample(pool, min(n, len(pool)))

    many = per_kind + per_kind // 2
    for topic, text in pick("keyword", many):
        out.append(ScenarioQuery(f"kw-{len(out):03d}", "keyword-exact", text, (topic,)))
    for topic, text in pick("paraphrase", many):
        out.append(ScenarioQuery(f"pa-{len(out):03d}", "paraphrase", text, (topic,)))
    for topic, text in pick("procedure", per_kind):
        out.append(ScenarioQuery(f"pr-{len(out):03d}", "procedure", text, (topic,)))

    singles = sorted(
        (topic, text) for topic, q in asks.items() for kind, text in q.items() if kind != "keyword"
    )
    joins = ("{a} and also {b}", "two things: {a}; {b}", "{a} Plus: {b}")
    for _ in range(per_kind):
        (ta, qa), (tb, qb) = rng.sample(singles, 2)
        while tb.split("-")[0] == ta.split("-")[0]:
            tb, qb = rng.choice(singles)
        text = rng.choice(joins).format(a=qa.rstrip("?"), b=qb)
        out.append(ScenarioQuery(f"mt-{len(out):03d}", "multi-topic", text, (ta, tb)))

    misses: list[str] = list(MISSING_QUESTIONS)
    for service in sorted(MISSING_SERVICES):
        misses.append(f"why {service} {rng.choice(FAILURES)[1]}")
        goal_ask = rng.choice(PROCEDURES)[1]
        misses.append(f"how do I {goal_ask.format(service=service, env=rng.choice(ENVIRONMENTS))}?")
    for project in MISSING_PROJECTS:
        for _, ask, _ in rng.sample(CONVENTIONS, 3):
            misses.append(ask.format(project=project))
    misses += [f"what happened in INC-{n}" for n in rng.sample(range(10000, 20000), 4)]
    for text in rng.sample(misses, min(per_kind, len(misses))):
        out.append(ScenarioQuery(f"mi-{len(out):03d}", "miss", text, ()))
    return out
