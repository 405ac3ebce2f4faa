#!/usr/bin/env python3
"""Describe one cluster with botocore and print what botocore parsed.

botocore_test.go's TestClusterFieldsWithBotocore runs it after the
provisioner's SetStatus: botocore's REST-JSON parser decodes the response by
AWS's EKS model (identity.oidc.issuer, health.issues, resourcesVpcConfig's
vpcId and clusterSecurityGroupId, certificateAuthority), so a member of the
wrong shape fails here. It prints, on the last line of stdout, one JSON
object: the parsed members the test compares, plus the Python type names of
the structures, as botocore built them.
"""

import argparse
import json
import sys

import botocore.session
from botocore.config import Config


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
    c = client.describe_cluster(name=args.cluster)["cluster"]
    vpc = c.get("resourcesVpcConfig", {})
    out = {
        "status": c.get("status"),
        "endpoint": c.get("endpoint"),
        "certificateAuthority": c.get("certificateAuthority", {}).get("data"),
        "issuer": c.get("identity", {}).get("oidc", {}).get("issuer"),
        "vpcId": vpc.get("vpcId"),
        "clusterSecurityGroupId": vpc.get("clusterSecurityGroupId"),
        "subnetIds": vpc.get("subnetIds"),
        "issues": c.get("health", {}).get("issues"),
        "types": {
            "identity": type(c.get("identity")).__name__,
            "oidc": type(c.get("identity", {}).get("oidc")).__name__,
            "health": type(c.get("health")).__name__,
            "createdAt": type(c.get("createdAt")).__name__,
        },
    }
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
