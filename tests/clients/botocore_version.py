#!/usr/bin/env python3
"""Drive Kubernetes versions and an upgrade with botocore; print what it parsed.

version_test.go's TestUpgradeWithBotocore runs it against a 1.35 cluster
whose metrics-server add-on runs a version that is not compatible with 1.36.
botocore serializes by AWS's EKS model (the query string of
DescribeClusterVersions with a repeated clusterVersions, ListInsights' body)
and parses the responses by it, so a member of the wrong shape or name fails
here. It prints, on the last line of stdout, one JSON object with what the
test compares.
"""

import argparse
import json
import sys

import botocore.session
from botocore.config import Config


def error_of(call):
    """The error code and message of a call that must fail."""
    try:
        call()
    except botocore.exceptions.ClientError as e:
        return {"code": e.response["Error"]["Code"], "message": e.response["Error"]["Message"]}
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--cluster", required=True)
    args = p.parse_args()
    client = botocore.session.get_session().create_client(
        "eks",
        region_name="us-east-1",
        endpoint_url=args.endpoint,
        # Credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=30),
    )
    pages = client.get_paginator("describe_cluster_versions").paginate(PaginationConfig={"PageSize": 2})
    versions = [v for page in pages for v in page["clusterVersions"]]
    chosen = client.describe_cluster_versions(clusterVersions=["1.35", "1.36"])["clusterVersions"]
    default = client.describe_cluster_versions(defaultOnly=True)["clusterVersions"]

    insights = client.list_insights(clusterName=args.cluster, filter={"categories": ["UPGRADE_READINESS"]})["insights"]
    insight = client.describe_insight(clusterName=args.cluster, id=insights[0]["id"])["insight"] if insights else {}
    summary = insight.get("categorySpecificSummary", {})
    addon_versions = client.describe_addon_versions(addonName="metrics-server", kubernetesVersion="1.36")["addons"]

    skipped = error_of(lambda: client.update_cluster_version(name=args.cluster, version="1.37"))
    update = client.update_cluster_version(name=args.cluster, version="1.36", clientRequestToken="botocore-1")["update"]
    second = error_of(lambda: client.update_cluster_version(name=args.cluster, version="1.36"))
    cluster = client.describe_cluster(name=args.cluster)["cluster"]

    out = {
        "versions": [v["clusterVersion"] for v in versions],
        "chosen": [v["clusterVersion"] for v in chosen],
        "default": [(v["clusterVersion"], v["defaultVersion"], v["versionStatus"]) for v in default],
        "dateTypes": sorted({type(v["releaseDate"]).__name__ for v in versions}),
        "insights": [(i["name"], i["category"], i["kubernetesVersion"], i["insightStatus"]["status"]) for i in insights],
        "reason": insight.get("insightStatus", {}).get("reason"),
        "details": [(d["name"], d["compatibleVersions"]) for d in summary.get("addonCompatibilityDetails", [])],
        "toMoveTo": [
            (v["addonVersion"], c["clusterVersion"], c["defaultVersion"])
            for a in addon_versions for v in a["addonVersions"] for c in v["compatibilities"]
        ],
        "skipped": skipped,
        "update": {"id": update["id"], "status": update["status"], "type": update["type"],
                   "params": {q["type"]: q["value"] for q in update["params"]}},
        "second": second,
        "clusterStatus": cluster["status"],
        "clusterVersion": cluster["version"],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
