#!/usr/bin/env python3
"""Drives saltbush's EKS Pod Identity association API with botocore, the
library under boto3 and the AWS CLI, the way podidentity_test.go's
TestPodIdentityAssociationsWithBotocore runs it, against an ACTIVE cluster:

  create-pod-identity-association (tags, targetRoleArn, a
  clientRequestToken), its replay (the same associationId), the same
  service account again (ResourceInUseException); describe; list through
  the paginator one a page, filtered by namespace and serviceAccount;
  update (roleArn, disableSessionTags); tag-resource /
  list-tags-for-resource on the association ARN; errors (a malformed id:
  InvalidParameterException; an unknown one: ResourceNotFoundException);
  create-addon vpc-cni with podIdentityAssociations and describe of every
  association ARN it returns (what Terraform's aws_eks_addon does), whose
  ownerArn is the add-on; update and delete of the owned association
  (InvalidRequestException); delete of the direct one, then describe fails.

It checks the shapes botocore parsed, prints progress to stderr and, on
success, one JSON object on the last line of stdout; it exits 1 listing
every failed check.
"""

import argparse
import datetime
import json
import re
import sys

import botocore
import botocore.session
from botocore.config import Config
from botocore.exceptions import ClientError

REGION = "us-east-1"
ACCOUNT = "000000000000"
ROLE = "arn:aws:iam::000000000000:role/pods"
ROLE2 = "arn:aws:iam::000000000000:role/pods-2"
TARGET = "arn:aws:iam::111111111111:role/target"
ID = r"a-[a-z0-9]{17}"

failures = []


def check(cond, msg, *args):
    if not cond:
        failures.append(msg % args if args else msg)
    return cond


def log(fmt, *args):
    print("botocore_podidentity: " + (fmt % args if args else fmt), file=sys.stderr, flush=True)


def error(client, call, code, status, what, contains=None):
    try:
        out = call()
    except ClientError as e:
        err = e.response.get("Error", {})
        msg = err.get("Message") or ""
        check(err.get("Code") == code, "%s: Error.Code %r, want %s", what, err.get("Code"), code)
        check(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == status, "%s: HTTP status %r, want %d",
              what, e.response.get("ResponseMetadata", {}).get("HTTPStatusCode"), status)
        check(isinstance(e, getattr(client.exceptions, code)), "%s: not client.exceptions.%s", what, code)
        if contains is not None:
            check(contains in msg, "%s: message %r does not say %r", what, msg, contains)
        log("%s: %s (%s)", what, code, msg)
        return
    failures.append("%s: succeeded with %r, want %s" % (what, out, code))


def recent(value, what):
    if check(isinstance(value, datetime.datetime) and value.tzinfo is not None, "%s = %r, want an aware datetime", what, value):
        skew = abs((datetime.datetime.now(datetime.timezone.utc) - value).total_seconds())
        check(skew < 300, "%s = %s is %.0fs from now", what, value, skew)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--cluster", required=True)
    args = p.parse_args()
    eks = botocore.session.get_session().create_client(
        "eks", region_name=REGION, endpoint_url=args.endpoint,
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=30))
    cl = args.cluster
    log("botocore %s against %s", botocore.__version__, args.endpoint)

    a = eks.create_pod_identity_association(clusterName=cl, namespace="apps", serviceAccount="web", roleArn=ROLE,
                                            tags={"client": "botocore"}, targetRoleArn=TARGET,
                                            clientRequestToken="boto-1")["association"]
    aid = a["associationId"]
    check(re.fullmatch(ID, aid), "associationId %r", aid)
    check(a["associationArn"] == "arn:aws:eks:%s:%s:podidentityassociation/%s/%s" % (REGION, ACCOUNT, cl, aid),
          "associationArn %r", a["associationArn"])
    check(a["tags"] == {"client": "botocore"}, "tags %r", a.get("tags"))
    check(a.get("disableSessionTags") is False, "disableSessionTags %r, want False", a.get("disableSessionTags"))
    check(a.get("targetRoleArn") == TARGET and a.get("externalId"), "target %r externalId %r", a.get("targetRoleArn"), a.get("externalId"))
    check("ownerArn" not in a, "ownerArn %r on a direct association", a.get("ownerArn"))
    recent(a.get("createdAt"), "createdAt")
    again = eks.create_pod_identity_association(clusterName=cl, namespace="apps", serviceAccount="web", roleArn=ROLE,
                                                tags={"client": "botocore"}, targetRoleArn=TARGET,
                                                clientRequestToken="boto-1")["association"]
    check(again["associationId"] == aid, "replay made %r, first %r", again["associationId"], aid)
    error(eks, lambda: eks.create_pod_identity_association(clusterName=cl, namespace="apps", serviceAccount="web", roleArn=ROLE),
          "ResourceInUseException", 409, "second association of apps/web", contains=aid)

    d = eks.describe_pod_identity_association(clusterName=cl, associationId=aid)["association"]
    check(d["associationArn"] == a["associationArn"] and d["namespace"] == "apps", "described %r", d)

    for i in range(3):
        eks.create_pod_identity_association(clusterName=cl, namespace="jobs", serviceAccount="job-%d" % i, roleArn=ROLE)
    listed = []
    for page in eks.get_paginator("list_pod_identity_associations").paginate(clusterName=cl, PaginationConfig={"PageSize": 1}):
        check(len(page["associations"]) <= 1, "page of %d", len(page["associations"]))
        listed += page["associations"]
    check(len(listed) == 4, "listed %d associations, want 4", len(listed))
    jobs = eks.list_pod_identity_associations(clusterName=cl, namespace="jobs")["associations"]
    check(sorted(s["serviceAccount"] for s in jobs) == ["job-0", "job-1", "job-2"], "namespace filter %r", jobs)
    one = eks.list_pod_identity_associations(clusterName=cl, namespace="jobs", serviceAccount="job-1")["associations"]
    check(len(one) == 1 and one[0]["clusterName"] == cl, "both filters %r", one)

    u = eks.update_pod_identity_association(clusterName=cl, associationId=aid, roleArn=ROLE2, disableSessionTags=True)["association"]
    check(u["roleArn"] == ROLE2 and u["disableSessionTags"] is True, "updated %r", u)

    eks.tag_resource(resourceArn=a["associationArn"], tags={"env": "dev"})
    tags = eks.list_tags_for_resource(resourceArn=a["associationArn"])["tags"]
    check(tags == {"client": "botocore", "env": "dev"}, "tags after tag-resource %r", tags)

    error(eks, lambda: eks.describe_pod_identity_association(clusterName=cl, associationId="a-1"),
          "InvalidParameterException", 400, "describe a malformed id")
    error(eks, lambda: eks.describe_pod_identity_association(clusterName=cl, associationId="a-00000000000000000"),
          "ResourceNotFoundException", 404, "describe an unknown id")

    addon = eks.create_addon(clusterName=cl, addonName="vpc-cni",
                             podIdentityAssociations=[{"serviceAccount": "aws-node", "roleArn": ROLE}])["addon"]
    arns = addon.get("podIdentityAssociations") or []
    check(len(arns) == 1, "add-on associations %r", arns)
    owned = []
    for arn in arns:
        o = eks.describe_pod_identity_association(clusterName=cl, associationId=arn.rsplit("/", 1)[1])["association"]
        check(o["ownerArn"] == addon["addonArn"] and o["serviceAccount"] == "aws-node" and o["namespace"] == "kube-system",
              "owned association %r", o)
        owned.append(o["associationId"])
    if owned:
        error(eks, lambda: eks.update_pod_identity_association(clusterName=cl, associationId=owned[0], roleArn=ROLE2),
              "InvalidRequestException", 400, "update an owned association")
        error(eks, lambda: eks.delete_pod_identity_association(clusterName=cl, associationId=owned[0]),
              "InvalidRequestException", 400, "delete an owned association")

    gone = eks.delete_pod_identity_association(clusterName=cl, associationId=aid)["association"]
    check(gone["associationId"] == aid and gone["roleArn"] == ROLE2, "deleted %r", gone)
    error(eks, lambda: eks.describe_pod_identity_association(clusterName=cl, associationId=aid),
          "ResourceNotFoundException", 404, "describe the deleted association")

    if failures:
        print("%d check(s) failed:" % len(failures), file=sys.stderr)
        for f in failures:
            print("  - " + f, file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"deleted": aid, "owned": owned, "botocore": botocore.__version__}, sort_keys=True))


if __name__ == "__main__":
    main()
