"""Verdicts: what rejections, re-admissions, promotions and approvals add up to, and their store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import InvalidArgumentError
from conch.release.outcomes import approvals_missing, default_baseline, refusal_to_start, verdicts_of
from conch.release.signed_actions import readmitted_version, signer
from conch.release.spec import spec_from_dict, spec_to_json
from conch.release.state import Release
from conch.release.verdict_store import VerdictStore, VerdictStoreError
from conch.release.verdicts import (
    APPROVED,
    ENDED,
    PROMOTED,
    READMITTED,
    REJECTED,
    ModelVerdicts,
    Verdict,
    VerdictBook,
    fold,
    release_digest,
)
from conch.repository.version_policy import select_versions

SPEC = spec_from_dict(
    {"candidate": 3, "steps": [{"weight": 10}, {"pause": True, "approvals": 2}, {"weight": 100}]}
)


def rejected(version: int, at: float, fingerprint: str | None = "abc") -> Verdict:
    return Verdict(REJECTED, "m", at, version=version, fingerprint=fingerprint, reason="gate: agreement")


def test_a_rejection_holds_until_a_later_readmission_and_a_later_rejection_sets_it_again() -> None:
    readmit = Verdict(READMITTED, "m", 2.0, version=3)
    assert 3 in fold([rejected(3, 1.0)])["m"].rejected
    assert fold([readmit, rejected(3, 1.0)])["m"].rejected == {}  # folded by time, not by arrival
    assert 3 in fold([rejected(3, 1.0), readmit, rejected(3, 3.0)])["m"].rejected


def test_a_promotion_is_the_last_promoted_version_and_lifts_its_rejection() -> None:
    verdicts = fold(
        [rejected(3, 1.0), Verdict(PROMOTED, "m", 2.0, version=3), Verdict(PROMOTED, "n", 1, version=7)]
    )
    assert verdicts["m"].promoted == 3 and verdicts["m"].rejected == {}
    assert verdicts["n"].promoted == 7


def test_approvals_count_distinct_identities_per_release_and_step() -> None:
    records = [
        Verdict(APPROVED, "m", t, release="r1", step=2, identity=who)
        for t, who in enumerate(["alice", "alice", "bob"])
    ]
    records.append(Verdict(APPROVED, "m", 9, release="r2", step=2, identity="carol"))
    verdicts = fold(records)["m"]
    assert verdicts.approvers("r1", 2) == ["alice", "bob"]
    assert verdicts.approvers("r1", 1) == [] and verdicts.approvers("r2", 2) == ["carol"]


def test_a_rejection_applies_to_its_content_only() -> None:
    rejection = fold([rejected(3, 1.0, "abc")])["m"].rejected[3]
    assert rejection.applies_to("abc") and not rejection.applies_to("def")
    assert fold([rejected(3, 1.0, None)])["m"].rejected[3].applies_to("def")  # not fingerprinted yet


def test_the_release_digest_is_the_same_for_the_same_spec_and_model_only() -> None:
    same = spec_from_dict(json.loads(json.dumps(spec_to_json(SPEC))))
    assert release_digest("m", spec_to_json(SPEC)) == release_digest("m", spec_to_json(same))
    assert release_digest("m", spec_to_json(SPEC)) != release_digest("other", spec_to_json(SPEC))
    readmitting = spec_from_dict({**spec_to_json(SPEC), "readmit": True})
    assert release_digest("m", spec_to_json(SPEC)) != release_digest("m", spec_to_json(readmitting))


def test_a_rollback_rejects_unless_withdrawn_and_every_end_is_recorded() -> None:
    release = Release.create(SPEC, 0.0, serving=2)
    release.versions_ready(1.0)
    event = release.rollback(2.0, "gate: agreement 0.6")
    kinds = [v.kind for v in verdicts_of("m", release, "r1", event, reject=True)]
    assert kinds == [REJECTED, ENDED]
    assert [v.kind for v in verdicts_of("m", release, "r1", event, reject=False)] == [ENDED]
    assert "gate: agreement 0.6" in verdicts_of("m", release, "r1", event, reject=True)[0].reason
    promoted = Release.create(spec_from_dict({"candidate": 3, "steps": [{"weight": 100}]}), 0.0, serving=2)
    promoted.versions_ready(1.0)
    done = promoted.advance_if_due(2.0)
    assert done is not None
    assert [v.kind for v in verdicts_of("m", promoted, "r2", done, reject=True)] == [PROMOTED, ENDED]


def test_a_rejected_candidate_needs_readmit_and_mode_none_needs_its_folder() -> None:
    verdicts = fold([rejected(3, 1.0)])["m"]
    refusal = refusal_to_start("m", SPEC, verdicts, [1, 2, 3], folders_appear=True)
    assert refusal is not None and "conch release readmit m 3" in refusal
    readmitting = spec_from_dict({**spec_to_json(SPEC), "readmit": True})
    assert refusal_to_start("m", readmitting, verdicts, [1, 2, 3], folders_appear=True) is None
    missing = refusal_to_start("m", SPEC, ModelVerdicts(), [1, 2], folders_appear=False)
    assert missing is not None and "--model-control-mode poll" in missing
    assert refusal_to_start("m", SPEC, ModelVerdicts(), [1, 2], folders_appear=True) is None


def test_a_step_waits_for_its_approvals() -> None:
    release = Release.create(SPEC, 0.0, serving=2)
    release.versions_ready(1.0)
    assert approvals_missing(release, "r1", ModelVerdicts()) is None  # step 1 needs none
    release.promote(2.0)
    verdicts = fold([Verdict(APPROVED, "m", 3.0, release="r1", step=2, identity="alice")])["m"]
    missing = approvals_missing(release, "r1", verdicts)
    assert missing is not None and "needs 2 approvals" in missing and "alice" in missing
    verdicts.apply(Verdict(APPROVED, "m", 4.0, release="r1", step=2, identity="bob"))
    assert approvals_missing(release, "r1", verdicts) is None


def test_the_default_baseline_is_never_a_rejected_version() -> None:
    assert default_baseline(None, [1, 2, 3, 4], 4, promoted=2, rejected={3: object()}) == 2
    assert default_baseline(None, [1, 2, 3, 4], 4, promoted=None, rejected={3: object()}) == 2
    assert default_baseline(None, [1, 2, 3, 4], 4, promoted=3, rejected={3: object()}) == 2


def test_the_version_policy_counts_without_the_rejected_versions() -> None:
    latest = mc.ModelVersionPolicy(latest=mc.ModelVersionPolicy.Latest(num_versions=1))
    assert select_versions(latest, [1, 2, 3], rejected={3}) == [2]
    every = mc.ModelVersionPolicy(all=mc.ModelVersionPolicy.All())
    assert select_versions(every, [1, 2, 3], rejected={2}) == [1, 3]


def test_two_stores_on_one_folder_see_each_others_records_and_skip_strays(tmp_path: Path) -> None:
    first, second = VerdictStore(str(tmp_path / "store")), VerdictStore(str(tmp_path / "store"))
    assert first.read() == []  # an absent folder is an empty store
    first.append(rejected(3, 1.0))
    second.append(Verdict(READMITTED, "m", 2.0, version=3))
    (tmp_path / "store" / "m" / "stray.json").write_text("{not json")
    assert [v.kind for v in first.read()] == [REJECTED, READMITTED]
    assert fold(second.read())["m"].rejected == {}


def test_a_store_that_cannot_be_listed_or_a_name_that_leaves_it_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(VerdictStoreError, match="cannot read the release store"):
        VerdictStore(str(tmp_path / "file")).read()
    with pytest.raises(VerdictStoreError, match="cannot name a record"):
        VerdictStore(str(tmp_path / "s")).append(Verdict(REJECTED, "../x", 1.0, version=1))


def test_the_book_reports_the_models_whose_served_part_changed() -> None:
    book = VerdictBook()
    book.add(rejected(3, 1.0))  # taken here, not yet stored
    assert 3 in book.of("m").rejected
    assert book.read([Verdict(PROMOTED, "n", 1.0, version=2)]) == {"n"}  # m's pending record stays
    assert 3 in book.of("m").rejected


def test_who_approves_comes_from_the_token_else_from_the_body() -> None:
    assert signer({}, "alice") == "alice"
    with pytest.raises(InvalidArgumentError, match="comes from your token"):
        signer({"identity": "bob"}, "alice")
    assert signer({"identity": "bob"}, "") == "bob"
    for bad in ({}, {"identity": ""}, {"identity": "x" * 200}, {"identity": "a b"}):
        with pytest.raises(InvalidArgumentError, match="say who"):
            signer(bad, "")
    assert readmitted_version({"version": 3}) == 3
    with pytest.raises(InvalidArgumentError, match="readmit needs the version"):
        readmitted_version({"version": True})
