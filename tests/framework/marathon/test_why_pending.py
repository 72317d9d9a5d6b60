"""Why an app waits, in /v2/queue on a real master and agent (4 GPUs, gpu_type
tesla_k80): Marathon's processedOffersSummary counts the offers and says which check
declined them (rejectSummaryLastOffers), and waitingReason says it in words."""
from tests.bed.waiting import wait_until
from tests.bed.framework_process import app


def queued(api, app_id):
    """The app's summary once the scheduler has seen offers for it and the API has its
    task's word on why (the registry follows the scheduler a moment later)."""
    items = [q for q in api.get("/v2/queue").json["queue"] if q["app"]["id"] == app_id]
    summary = items[0]["processedOffersSummary"] if items else {}
    ready = summary.get("processedOffersCount") and \
        summary.get("waitingReason", "").startswith("waiting: ")
    return summary if ready else None


def declined(summary):
    return {r["reason"]: r["declined"] for r in summary["rejectSummaryLastOffers"]
            if r["declined"]}


def test_the_queue_says_which_check_declined_the_offers(api):
    assert api.post("/v2/apps", app("/big", gpus=16, instances=1)).status == 201
    assert api.post("/v2/apps", app("/a100", gpus=1, instances=1, constraints=[
        ["gpu_type", "LIKE", "a100.*"]])).status == 201
    big = wait_until(lambda: queued(api, "/big"), timeout=30)
    assert declined(big) == {"InsufficientGpus": 1}, big
    assert big["unusedOffersCount"] >= 1 and "lastUnusedOfferAt" in big
    assert big["rejectSummaryLastOffers"][0] == {"reason": "UnfulfilledRole", "declined": 0,
                                                 "processed": 1}
    assert big["waitingReason"] == ("waiting: needs 16 GPUs on one node; the largest free "
                                    "block offered is 4 (of 1 offered agent(s))")
    a100 = wait_until(lambda: queued(api, "/a100"), timeout=30)
    assert declined(a100) == {"UnfulfilledConstraint": 1}, a100
    assert a100["waitingReason"] == ("waiting: no offered agent (1 offered) qualifies for "
                                     "gpu_type:LIKE:a100.*")
