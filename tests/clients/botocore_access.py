#!/usr/bin/env python3
"""Drives saltbush's EKS access-entry API with botocore, the library under
boto3 and the AWS CLI, the way access_test.go's TestAccessEntriesWithBotocore
runs it: one step per invocation, against an ACTIVE cluster in
authentication mode API that the development user created (so its creator
entry, the dev user with AmazonEKSClusterAdminPolicy on cluster scope, was
seeded), with the IAM principals --role, --user, --node-role and
--spare-role created by the test (the last one never gets an entry).

Steps:
  entries   the creator entry; create-access-entry (STANDARD role with
            kubernetesGroups, tags and a clientRequestToken), its replay
            (same accessEntryArn), the token reused with other parameters
            (InvalidParameterException), a duplicate (ResourceInUseException);
            describe-access-entry; a user entry and an EC2_LINUX entry;
            list-access-entries through the paginator one entry a page, and
            filtered by associatedPolicyArn; update-access-entry (groups and
            username); tag-resource / list-tags-for-resource / untag-resource
            on the entry's ARN
  policies  associate-access-policy on namespace scope (a trailing *), the
            same policy again on cluster scope (the scope replaced;
            `"namespaces": []` checked in the raw JSON through an after-call
            hook, too), a second policy; list-associated-access-policies through
            the paginator, list-access-entries filtered by a policy,
            disassociate-access-policy (twice: ResourceNotFoundException),
            list-access-policies through the paginator (the 19 policies)
  errors    typed ClientErrors: system: username and group, a non-STANDARD
            entry with groups, associate / update on an EC2_LINUX entry
            (InvalidRequestException), describe of a missing entry
            (ResourceNotFoundException), a duplicate create
            (ResourceInUseException)
  delete    delete-access-entry; describe / delete / list-tags-for-resource
            of the deleted entry fail; list-access-entries no longer has it
  token     (needs only --cluster) prints the ExecCredential `aws eks
            get-token --cluster-name {cluster}` prints, made the way the CLI
            makes it: an STS client presigns GetCallerIdentity for 60 s with
            the x-k8s-aws-id header added on before-sign; for a CLI without
            get-token

Every step checks the shapes botocore parsed (datetimes, lists, maps),
prints progress to stderr and, on success, one JSON object on the last
line of stdout. It exits 1 listing every failed check.
"""

import argparse
import base64
import datetime
import json
import re
import sys
import uuid

import botocore
import botocore.session
from botocore.config import Config
from botocore.exceptions import ClientError

ACCOUNT = "000000000000"
REGION = "us-east-1"
DEV_USER = "arn:aws:iam::000000000000:user/saltbush-dev"
POLICY_PREFIX = "arn:aws:eks::aws:cluster-access-policy/"
ADMIN_POLICY = POLICY_PREFIX + "AmazonEKSClusterAdminPolicy"
EDIT_POLICY = POLICY_PREFIX + "AmazonEKSEditPolicy"
VIEW_POLICY = POLICY_PREFIX + "AmazonEKSViewPolicy"
CREATE_GROUPS = ["deployers", "viewers"]
UPDATE_GROUPS = ["deployers", "ops"]
UPDATE_USERNAME = "ops:{{SessionName}}"
TAGS = {"team": "ops", "client": "botocore"}
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
STANDARD_ONLY = 'This operation can only be performed on Access Entries with a type of "STANDARD".'


class Checks:
    """Collects failed checks so one run reports all of them."""

    def __init__(self, step):
        self.step = step
        self.failures = []

    def check(self, cond, msg, *args):
        if not cond:
            self.failures.append(msg % args if args else msg)
        return cond

    def eq(self, got, want, what):
        return self.check(got == want, "%s = %r, want %r", what, got, want)

    def datetime_now(self, value, what):
        """value must be a timezone-aware datetime close to now."""
        if not self.check(isinstance(value, datetime.datetime),
                          "%s is %r (%s), want a datetime", what, value, type(value).__name__):
            return
        if not self.check(value.tzinfo is not None, "%s = %r has no timezone", what, value):
            return
        now = datetime.datetime.now(datetime.timezone.utc)
        skew = abs((now - value).total_seconds())
        self.check(skew < 300, "%s = %s is %.0fs away from now", what, value.isoformat(), skew)

    def error(self, client, call, code, status, what, message=None, contains=None, **fields):
        """call must fail with botocore's ClientError of code and HTTP
        status, also catchable as the client's modeled exception class;
        message, when given, is the exact Error.Message, contains a part of
        it; fields are modeled error members botocore copies to the top level
        of the response."""
        try:
            out = call()
        except ClientError as e:
            err = e.response.get("Error", {})
            msg = err.get("Message") or ""
            self.eq(err.get("Code"), code, what + ": Error.Code")
            self.check(bool(msg), "%s: empty Error.Message in %r", what, e.response)
            if message is not None:
                self.eq(msg, message, what + ": Error.Message")
            if contains is not None:
                self.check(contains in msg, "%s: Error.Message %r does not say %r", what, msg, contains)
            self.eq(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode"), status, what + ": HTTP status")
            modeled = getattr(client.exceptions, code, None)
            self.check(modeled is not None and isinstance(e, modeled),
                       "%s: %s is not client.exceptions.%s", what, type(e).__name__, code)
            for k, v in fields.items():
                self.eq(e.response.get(k), v, "%s: error member %s" % (what, k))
            log("%s: %s (%s)", what, err.get("Code"), msg)
            return e
        self.failures.append("%s: succeeded with %r, want %s" % (what, out, code))
        return None

    def finish(self, result):
        if self.failures:
            print("step %s: %d check(s) failed:" % (self.step, len(self.failures)), file=sys.stderr)
            for f in self.failures:
                print("  - " + f, file=sys.stderr)
            sys.exit(1)
        result["step"] = self.step
        result["botocore"] = botocore.__version__
        print(json.dumps(result, sort_keys=True))


def log(fmt, *args):
    print("botocore_access: " + (fmt % args if args else fmt), file=sys.stderr, flush=True)


class RawBodies:
    """Keeps the raw JSON body of every response, by operation, through
    botocore's after-call event: what was on the wire, before botocore's
    parser filled in or dropped anything."""

    def __init__(self, client):
        self.bodies = {}
        client.meta.events.register("after-call.eks", self._record)

    def _record(self, http_response, model, **kwargs):
        try:
            body = json.loads(http_response.content or b"null")
        except ValueError:
            body = http_response.content
        self.bodies.setdefault(model.name, []).append(body)

    def last(self, op):
        return (self.bodies.get(op) or [None])[-1]

    def all(self, op):
        return list(self.bodies.get(op) or [])


def new_client(endpoint):
    session = botocore.session.get_session()
    return session.create_client(
        "eks",
        region_name=REGION,
        endpoint_url=endpoint,
        # Credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY:
        # the key saltbush made for its development administrator.
        # One attempt: a failure must show, not hide in a retry.
        config=Config(retries={"max_attempts": 1, "mode": "standard"},
                      connect_timeout=5, read_timeout=30),
    )


def principal_parts(arn):
    """(kind, account, name without path) of an IAM user or role ARN."""
    m = re.match(r"^arn:aws:iam::([0-9]{12}):(user|role)/(?:.*/)?([^/]+)$", arn)
    return (m.group(2), m.group(1), m.group(3)) if m else (None, None, None)


def entry_arn_re(cluster, principal):
    kind, acct, name = principal_parts(principal)
    return re.compile("^" + re.escape("arn:aws:eks:%s:%s:access-entry/%s/%s/%s/%s/" % (
        REGION, ACCOUNT, cluster, kind, acct, name)) + UUID + "$")


def check_entry(c, e, cluster, principal, etype, username, groups, tags, what):
    """The AccessEntry shape create, describe and update return."""
    c.check(isinstance(e, dict), "%s = %r, want a dict", what, e)
    e = e or {}
    c.eq(e.get("clusterName"), cluster, what + ".clusterName")
    c.eq(e.get("principalArn"), principal, what + ".principalArn")
    c.eq(e.get("type"), etype, what + ".type")
    c.check(isinstance(e.get("type"), str), "%s.type is %r, want a str", what, e.get("type"))
    c.eq(e.get("username"), username, what + ".username")
    kg = e.get("kubernetesGroups")
    c.check(isinstance(kg, list), "%s.kubernetesGroups = %r (%s), want a list", what, kg, type(kg).__name__)
    c.eq(kg, groups, what + ".kubernetesGroups")
    t = e.get("tags")
    c.check(isinstance(t, dict), "%s.tags = %r (%s), want a dict", what, t, type(t).__name__)
    c.eq(t, tags, what + ".tags")
    arn = e.get("accessEntryArn", "")
    c.check(entry_arn_re(cluster, principal).match(arn or "") is not None,
            "%s.accessEntryArn = %r, want %s", what, arn, entry_arn_re(cluster, principal).pattern)
    c.datetime_now(e.get("createdAt"), what + ".createdAt")
    c.datetime_now(e.get("modifiedAt"), what + ".modifiedAt")
    if isinstance(e.get("createdAt"), datetime.datetime) and isinstance(e.get("modifiedAt"), datetime.datetime):
        c.check(e["modifiedAt"] >= e["createdAt"], "%s.modifiedAt %s is before createdAt %s",
                what, e["modifiedAt"], e["createdAt"])
    return e


def check_association(c, a, policy, scope, what):
    """An AssociatedAccessPolicy: scope is the accessScope dict expected."""
    c.check(isinstance(a, dict), "%s = %r, want a dict", what, a)
    a = a or {}
    c.eq(a.get("policyArn"), policy, what + ".policyArn")
    c.eq(a.get("accessScope"), scope, what + ".accessScope")
    ns = (a.get("accessScope") or {}).get("namespaces")
    c.check(isinstance(ns, list), "%s.accessScope.namespaces = %r, want a list", what, ns)
    c.datetime_now(a.get("associatedAt"), what + ".associatedAt")
    c.datetime_now(a.get("modifiedAt"), what + ".modifiedAt")


def generated_role_username(role):
    _, acct, name = principal_parts(role)
    return "arn:aws:sts::%s:assumed-role/%s/{{SessionName}}" % (acct, name)


def paged(c, client, op, what, **kwargs):
    """Every page of op through botocore's paginator."""
    pages = list(client.get_paginator(op).paginate(**kwargs))
    c.check(len(pages) > 0, "%s: no pages", what)
    return pages


def step_entries(eks, c, args):
    cl = args.cluster
    # The creator's entry, seeded with the cluster.
    creator = eks.describe_access_entry(clusterName=cl, principalArn=DEV_USER)["accessEntry"]
    check_entry(c, creator, cl, DEV_USER, "STANDARD", DEV_USER, [], {}, "creator entry")

    token = str(uuid.uuid4())
    req = dict(clusterName=cl, principalArn=args.role, kubernetesGroups=CREATE_GROUPS,
               tags=TAGS, clientRequestToken=token)
    out = eks.create_access_entry(**req)
    c.eq(out["ResponseMetadata"]["HTTPStatusCode"], 200, "create-access-entry HTTP status")
    e = check_entry(c, out.get("accessEntry"), cl, args.role, "STANDARD", generated_role_username(args.role),
                    CREATE_GROUPS, TAGS, "create-access-entry accessEntry")
    arn = e.get("accessEntryArn")
    c.eq(e.get("createdAt"), e.get("modifiedAt"), "create-access-entry modifiedAt (= createdAt on create)")
    log("created %s", arn)

    # The same token and parameters: the same entry, not an error.
    again = eks.create_access_entry(**req)["accessEntry"]
    c.eq(again.get("accessEntryArn"), arn, "replayed create-access-entry accessEntryArn")
    c.eq(again.get("createdAt"), e.get("createdAt"), "replayed create-access-entry createdAt")
    # The same token with another parameter is refused.
    c.error(eks, lambda: eks.create_access_entry(**dict(req, kubernetesGroups=["other"])),
            "InvalidParameterException", 400, "create-access-entry reusing a token with other groups")
    # A new token (or none) for an existing entry.
    c.error(eks, lambda: eks.create_access_entry(**dict(req, clientRequestToken=str(uuid.uuid4()))),
            "ResourceInUseException", 409, "create-access-entry of an existing entry", clusterName=cl)

    d = eks.describe_access_entry(clusterName=cl, principalArn=args.role)["accessEntry"]
    check_entry(c, d, cl, args.role, "STANDARD", generated_role_username(args.role), CREATE_GROUPS, TAGS,
                "describe-access-entry accessEntry")
    c.eq(d.get("accessEntryArn"), arn, "describe-access-entry accessEntryArn")
    c.eq(d.get("createdAt"), e.get("createdAt"), "describe-access-entry createdAt")

    # A user entry (no groups: an empty list) and a node entry.
    u = eks.create_access_entry(clusterName=cl, principalArn=args.user)["accessEntry"]
    check_entry(c, u, cl, args.user, "STANDARD", args.user, [], {}, "user entry")
    n = eks.create_access_entry(clusterName=cl, principalArn=args.node_role, type="EC2_LINUX")["accessEntry"]
    check_entry(c, n, cl, args.node_role, "EC2_LINUX", "system:node:{{EC2PrivateDNSName}}", ["system:nodes"], {},
                "EC2_LINUX entry")

    # Paged one a page through the paginator.
    pages = paged(c, eks, "list_access_entries", "list-access-entries",
                  clusterName=cl, PaginationConfig={"PageSize": 1})
    listed = [p for page in pages for p in page.get("accessEntries", [])]
    want = sorted([DEV_USER, args.role, args.user, args.node_role])
    c.eq(sorted(listed), want, "list-access-entries (paged) accessEntries")
    c.eq(len(listed), len(set(listed)), "list-access-entries (paged) entries without repeats")
    c.check(all(len(p.get("accessEntries", [])) <= 1 for p in pages),
            "list-access-entries with maxResults 1 returned a page of more: %r", pages)
    c.check(len(pages) >= 4, "list-access-entries with maxResults 1: %d pages, want at least 4", len(pages))
    c.check("nextToken" not in pages[-1], "the last page has a nextToken: %r", pages[-1])
    # Filtered by an associated policy.
    filtered = eks.list_access_entries(clusterName=cl, associatedPolicyArn=ADMIN_POLICY)
    c.eq(filtered.get("accessEntries"), [DEV_USER], "list-access-entries filtered by ClusterAdmin")
    filtered_paged = [p for page in paged(c, eks, "list_access_entries", "list-access-entries filtered, paged",
                                          clusterName=cl, associatedPolicyArn=ADMIN_POLICY,
                                          PaginationConfig={"PageSize": 1})
                      for p in page.get("accessEntries", [])]
    c.eq(filtered_paged, [DEV_USER], "list-access-entries filtered by ClusterAdmin, paged")

    # Update groups and username.
    up = eks.update_access_entry(clusterName=cl, principalArn=args.role, kubernetesGroups=UPDATE_GROUPS,
                                 username=UPDATE_USERNAME, clientRequestToken=str(uuid.uuid4()))["accessEntry"]
    check_entry(c, up, cl, args.role, "STANDARD", UPDATE_USERNAME, UPDATE_GROUPS, TAGS,
                "update-access-entry accessEntry")
    c.eq(up.get("accessEntryArn"), arn, "update-access-entry accessEntryArn")
    c.eq(up.get("createdAt"), e.get("createdAt"), "update-access-entry createdAt")
    c.check(isinstance(up.get("modifiedAt"), datetime.datetime) and isinstance(e.get("createdAt"), datetime.datetime)
            and up["modifiedAt"] > e["createdAt"],
            "update-access-entry modifiedAt %r did not move past createdAt %r", up.get("modifiedAt"), e.get("createdAt"))
    d = eks.describe_access_entry(clusterName=cl, principalArn=args.role)["accessEntry"]
    check_entry(c, d, cl, args.role, "STANDARD", UPDATE_USERNAME, UPDATE_GROUPS, TAGS,
                "describe-access-entry after update")
    c.eq(d.get("modifiedAt"), up.get("modifiedAt"), "describe-access-entry modifiedAt after update")

    # Tags on the entry's ARN.
    out = eks.tag_resource(resourceArn=arn, tags={"env": "dev"})
    c.eq(out["ResponseMetadata"]["HTTPStatusCode"], 200, "tag-resource HTTP status")
    tags = eks.list_tags_for_resource(resourceArn=arn).get("tags")
    c.eq(tags, dict(TAGS, env="dev"), "list-tags-for-resource after tag-resource")
    eks.untag_resource(resourceArn=arn, tagKeys=["client"])
    tags = eks.list_tags_for_resource(resourceArn=arn).get("tags")
    c.eq(tags, {"team": "ops", "env": "dev"}, "list-tags-for-resource after untag-resource")
    d = eks.describe_access_entry(clusterName=cl, principalArn=args.role)["accessEntry"]
    c.eq(d.get("tags"), {"team": "ops", "env": "dev"}, "describe-access-entry tags after tagging")
    c.finish({"accessEntryArn": arn, "createdAt": e["createdAt"].timestamp() if e.get("createdAt") else 0})


def step_policies(eks, c, args):
    cl = args.cluster
    raw = RawBodies(eks)

    ns_scope = {"type": "namespace", "namespaces": ["dev", "team-*"]}
    out = eks.associate_access_policy(clusterName=cl, principalArn=args.role, policyArn=EDIT_POLICY,
                                      accessScope=ns_scope)
    c.eq(out.get("clusterName"), cl, "associate-access-policy clusterName")
    c.eq(out.get("principalArn"), args.role, "associate-access-policy principalArn")
    first = out.get("associatedAccessPolicy") or {}
    check_association(c, first, EDIT_POLICY, ns_scope, "associate-access-policy (namespace) associatedAccessPolicy")

    # The same policy again on cluster scope replaces the scope: AWS
    # answers "namespaces": [], associatedAt stays and modifiedAt moves.
    cluster_scope = {"type": "cluster", "namespaces": []}
    out = eks.associate_access_policy(clusterName=cl, principalArn=args.role, policyArn=EDIT_POLICY,
                                      accessScope={"type": "cluster"})
    again = out.get("associatedAccessPolicy") or {}
    check_association(c, again, EDIT_POLICY, cluster_scope, "associate-access-policy (cluster) associatedAccessPolicy")
    c.eq(again.get("associatedAt"), first.get("associatedAt"), "re-associated policy associatedAt")
    c.check(isinstance(again.get("modifiedAt"), datetime.datetime) and isinstance(first.get("modifiedAt"), datetime.datetime)
            and again["modifiedAt"] > first["modifiedAt"],
            "re-associated policy modifiedAt %r did not move past %r", again.get("modifiedAt"), first.get("modifiedAt"))
    body = raw.last("AssociateAccessPolicy")
    wire_scope = ((body or {}).get("associatedAccessPolicy") or {}).get("accessScope")
    c.eq(wire_scope, cluster_scope, "associate-access-policy (cluster): the raw JSON accessScope")
    c.check(isinstance(wire_scope, dict) and wire_scope.get("namespaces") == [],
            "associate-access-policy (cluster): raw JSON %r has no \"namespaces\": []", body)
    log("cluster-scope association on the wire: %s", json.dumps(body, sort_keys=True))

    view_scope = {"type": "namespace", "namespaces": ["prod-*"]}
    out = eks.associate_access_policy(clusterName=cl, principalArn=args.role, policyArn=VIEW_POLICY,
                                      accessScope=view_scope)
    check_association(c, out.get("associatedAccessPolicy"), VIEW_POLICY, view_scope,
                      "associate-access-policy (View) associatedAccessPolicy")

    # The paginator, one association a page.
    pages = paged(c, eks, "list_associated_access_policies", "list-associated-access-policies",
                  clusterName=cl, principalArn=args.role, PaginationConfig={"PageSize": 1})
    assoc = {}
    for i, page in enumerate(pages):
        c.eq(page.get("clusterName"), cl, "list-associated-access-policies page %d clusterName" % i)
        c.eq(page.get("principalArn"), args.role, "list-associated-access-policies page %d principalArn" % i)
        c.check(len(page.get("associatedAccessPolicies", [])) <= 1,
                "list-associated-access-policies maxResults 1 returned %r", page)
        for a in page.get("associatedAccessPolicies", []):
            assoc[a.get("policyArn")] = a
    c.eq(sorted(assoc), sorted([EDIT_POLICY, VIEW_POLICY]), "list-associated-access-policies policies")
    c.check(len(pages) >= 2, "list-associated-access-policies with maxResults 1: %d pages, want at least 2", len(pages))
    if EDIT_POLICY in assoc:
        check_association(c, assoc[EDIT_POLICY], EDIT_POLICY, cluster_scope, "listed Edit association")
        c.eq(assoc[EDIT_POLICY].get("associatedAt"), first.get("associatedAt"), "listed Edit association associatedAt")
    if VIEW_POLICY in assoc:
        check_association(c, assoc[VIEW_POLICY], VIEW_POLICY, view_scope, "listed View association")
    wire = [a for body in raw.all("ListAssociatedAccessPolicies")
            for a in (body or {}).get("associatedAccessPolicies", []) if a.get("policyArn") == EDIT_POLICY]
    c.eq([a.get("accessScope") for a in wire], [cluster_scope],
         "list-associated-access-policies: the raw JSON scope of the cluster-scoped Edit")

    # The entry is listed under each associated policy.
    for pol in (EDIT_POLICY, VIEW_POLICY):
        got = [p for page in paged(c, eks, "list_access_entries", "list-access-entries filtered by " + pol,
                                   clusterName=cl, associatedPolicyArn=pol) for p in page.get("accessEntries", [])]
        c.eq(got, [args.role], "list-access-entries filtered by %s" % pol)

    out = eks.disassociate_access_policy(clusterName=cl, principalArn=args.role, policyArn=VIEW_POLICY)
    c.eq(out["ResponseMetadata"]["HTTPStatusCode"], 200, "disassociate-access-policy HTTP status")
    c.eq({k: v for k, v in out.items() if k != "ResponseMetadata"}, {}, "disassociate-access-policy output")
    c.error(eks, lambda: eks.disassociate_access_policy(clusterName=cl, principalArn=args.role, policyArn=VIEW_POLICY),
            "ResourceNotFoundException", 404, "disassociate-access-policy of a policy no longer associated")
    left = eks.list_associated_access_policies(clusterName=cl, principalArn=args.role)
    c.eq([(a.get("policyArn"), a.get("accessScope")) for a in left.get("associatedAccessPolicies", [])],
         [(EDIT_POLICY, cluster_scope)], "list-associated-access-policies after disassociate")

    # The catalogue, 7 a page.
    pages = paged(c, eks, "list_access_policies", "list-access-policies", PaginationConfig={"PageSize": 7})
    policies = [p for page in pages for p in page.get("accessPolicies", [])]
    names = [p.get("name") for p in policies]
    c.eq(len(policies), 19, "list-access-policies count")
    c.check(len(pages) == 3, "list-access-policies with maxResults 7: %d pages, want 3", len(pages))
    c.eq(names, sorted(names), "list-access-policies order")
    c.check("AmazonEKSClusterAdminPolicy" in names, "list-access-policies %r has no AmazonEKSClusterAdminPolicy", names)
    for p in policies:
        c.eq(sorted(p), ["arn", "name"], "access policy %s members" % p.get("name"))
        c.eq(p.get("arn"), POLICY_PREFIX + str(p.get("name")), "access policy %s arn" % p.get("name"))
    c.finish({"policies": names})


def step_errors(eks, c, args):
    cl = args.cluster
    c.error(eks, lambda: eks.create_access_entry(clusterName=cl, principalArn=args.spare_role, username="system:admin"),
            "InvalidParameterException", 400, "create-access-entry with username system:admin",
            contains="cannot start with system:", clusterName=cl)
    c.error(eks, lambda: eks.create_access_entry(clusterName=cl, principalArn=args.spare_role,
                                                 kubernetesGroups=["ok", "system:masters"]),
            "InvalidParameterException", 400, "create-access-entry with group system:masters",
            message="The kubernetes group name system:masters is invalid, it cannot start with system:",
            clusterName=cl)
    c.error(eks, lambda: eks.create_access_entry(clusterName=cl, principalArn=args.spare_role, type="EC2_LINUX",
                                                 kubernetesGroups=["g"]),
            "InvalidParameterException", 400, "create-access-entry EC2_LINUX with kubernetesGroups",
            contains="STANDARD", clusterName=cl)
    c.error(eks, lambda: eks.associate_access_policy(clusterName=cl, principalArn=args.node_role, policyArn=VIEW_POLICY,
                                                     accessScope={"type": "cluster"}),
            "InvalidRequestException", 400, "associate-access-policy on an EC2_LINUX entry",
            message=STANDARD_ONLY, clusterName=cl)
    c.error(eks, lambda: eks.update_access_entry(clusterName=cl, principalArn=args.node_role, kubernetesGroups=["g"]),
            "InvalidRequestException", 400, "update-access-entry of an EC2_LINUX entry",
            message=STANDARD_ONLY, clusterName=cl)
    c.error(eks, lambda: eks.describe_access_entry(clusterName=cl, principalArn=args.spare_role),
            "ResourceNotFoundException", 404, "describe-access-entry of a principal without an entry",
            contains="principalArn could not be found", clusterName=cl)
    c.error(eks, lambda: eks.create_access_entry(clusterName=cl, principalArn=args.role),
            "ResourceInUseException", 409, "create-access-entry duplicate", clusterName=cl)
    c.error(eks, lambda: eks.create_access_entry(clusterName="no-such-cluster", principalArn=args.spare_role),
            "ResourceNotFoundException", 404, "create-access-entry on a missing cluster")
    c.error(eks, lambda: eks.list_access_entries(clusterName=cl, associatedPolicyArn=POLICY_PREFIX + "Nope"),
            "InvalidParameterException", 400, "list-access-entries filtered by an unknown policy")
    # Nothing above wrote anything.
    got = [p for page in paged(c, eks, "list_access_entries", "list-access-entries", clusterName=cl)
           for p in page.get("accessEntries", [])]
    c.eq(sorted(got), sorted([DEV_USER, args.role, args.user, args.node_role]), "list-access-entries after the errors")
    c.finish({})


def step_delete(eks, c, args):
    cl = args.cluster
    arn = eks.describe_access_entry(clusterName=cl, principalArn=args.role)["accessEntry"]["accessEntryArn"]
    out = eks.delete_access_entry(clusterName=cl, principalArn=args.role)
    c.eq(out["ResponseMetadata"]["HTTPStatusCode"], 200, "delete-access-entry HTTP status")
    c.eq({k: v for k, v in out.items() if k != "ResponseMetadata"}, {}, "delete-access-entry output")
    c.error(eks, lambda: eks.describe_access_entry(clusterName=cl, principalArn=args.role),
            "ResourceNotFoundException", 404, "describe-access-entry after delete", clusterName=cl)
    c.error(eks, lambda: eks.delete_access_entry(clusterName=cl, principalArn=args.role),
            "ResourceNotFoundException", 404, "delete-access-entry again", clusterName=cl)
    c.error(eks, lambda: eks.list_tags_for_resource(resourceArn=arn),
            "NotFoundException", 404, "list-tags-for-resource of a deleted entry")
    got = [p for page in paged(c, eks, "list_access_entries", "list-access-entries", clusterName=cl)
           for p in page.get("accessEntries", [])]
    c.eq(sorted(got), sorted([DEV_USER, args.user, args.node_role]), "list-access-entries after delete")
    c.finish({"deleted": arn})


def step_token(_eks, c, args):
    """What awscli/customizations/eks/get_token.py does, in botocore only."""
    header = "x-k8s-aws-id"
    sts = botocore.session.get_session().create_client("sts", region_name=REGION)

    def keep_id(params, context, **kwargs):
        if header in params:
            context[header] = params.pop(header)

    def add_header(request, **kwargs):
        if header in request.context:
            request.headers[header] = request.context[header]

    sts.meta.events.register("provide-client-params.sts.GetCallerIdentity", keep_id)
    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_header)
    presigned = sts.generate_presigned_url("get_caller_identity", Params={header: args.cluster},
                                           ExpiresIn=60, HttpMethod="GET")
    token = "k8s-aws-v1." + base64.urlsafe_b64encode(presigned.encode()).decode().rstrip("=")
    expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=14)
    c.check(sts.meta.endpoint_url.startswith("https://sts."), "STS endpoint %s", sts.meta.endpoint_url)
    if c.failures:
        c.finish({})
    print(json.dumps({
        "kind": "ExecCredential",
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "spec": {},
        "status": {"expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"), "token": token},
    }))


STEPS = {"entries": step_entries, "policies": step_policies, "errors": step_errors, "delete": step_delete,
         "token": step_token}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", help="the façade's base URL")
    p.add_argument("--cluster", required=True, help="an ACTIVE cluster's name, authentication mode API")
    p.add_argument("--step", required=True, choices=sorted(STEPS))
    p.add_argument("--role", help="an IAM role ARN (may have a path) for the STANDARD entry")
    p.add_argument("--user", help="an IAM user ARN for a second STANDARD entry")
    p.add_argument("--node-role", help="an IAM role ARN for an EC2_LINUX entry")
    p.add_argument("--spare-role", help="an IAM role ARN that never gets an entry")
    args = p.parse_args()
    if args.step == "token":
        step_token(None, Checks(args.step), args)
        return
    for flag in ("endpoint", "role", "user", "node_role", "spare_role"):
        if not getattr(args, flag):
            p.error("--%s is required for step %s" % (flag.replace("_", "-"), args.step))
    log("botocore %s, step %s against %s", botocore.__version__, args.step, args.endpoint)
    STEPS[args.step](new_client(args.endpoint), Checks(args.step), args)


if __name__ == "__main__":
    main()
