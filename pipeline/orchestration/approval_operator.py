"""The approve step of lake_ingest: the standard provider's ApprovalOperator (a Required Action
in the Airflow UI, answerable over the REST API) that applies the answer to the held version.

Imports Airflow at module top (it subclasses an operator), like trigger.py; only the DAG file
imports it. The decisions themselves are in ``approval.py``.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Asset, AssetAlias

from pipeline.orchestration import approval
from pipeline.orchestration.tasks import DATASET_ALIAS, dataset_asset_uri


class VersionApprovalOperator(ApprovalOperator):
    """Ask whether the held ``version`` ({dataset, version_id, tag}) may be trained on.

    Approve: the version becomes latest and its dataset event is emitted through the
    dataset-versions alias (declare it in ``outlets``). Reject: it stays quarantined, with the
    form's reason. No answer in time: the task succeeds, the version stays undecided."""

    def __init__(self, *, version: dict[str, Any], **kwargs: Any) -> None:
        self.version = version
        super().__init__(**kwargs)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        if event.get("error_type") == "timeout":
            self.log.warning(
                "no answer in time for %s: it stays quarantined; the next ingest asks again "
                "(or run `laketrain approve %s`)",
                self.version["tag"],
                self.version["tag"],
            )
            return None
        ret = super().execute_complete(context=context, event=event)
        approved = ret["chosen_options"][0] == self.APPROVE
        reason = (ret.get("params_input") or {}).get("reason") or None
        who = approval.responder(ret.get("responded_by_user"))
        extra = approval.decide(self.version, approved, who=who, reason=reason)
        if extra is not None:
            uri = dataset_asset_uri(extra["dataset"])
            context["outlet_events"][AssetAlias(DATASET_ALIAS)].add(
                Asset(name=uri, uri=uri), extra=extra
            )
        return ret
