#!/usr/bin/env python3
"""Drive saltbush's EKS add-on API with botocore, a second real client.

The add-on lifecycle waits on guest reports, which this script cannot send:
botocore_test.go runs it once per step and sends the reports (through the
internal control API) in between:

  create  create-addon (configurationValues, tags, clientRequestToken), its
          idempotent replay, a name collision, describe-addon (CREATING), and
          error parsing (ResourceNotFoundException, InvalidParameterException)
          -- then the test reports READY with a health issue for generation 1
  update  describe-addon (DEGRADED, the health issue), update-addon (new
          configurationValues: an InProgress AddonUpdate with its own id),
          describe-update (addonName), list-updates, describe-addon (UPDATING)
          -- then the test reports READY for generation 2
  delete  describe-update (Successful), the addon_active waiter, describe-addon
          (ACTIVE, no issues, the new configurationValues), list-addons,
          delete-addon (DELETING), describe-addon (DELETING)
          -- then the test reports REMOVED for generation 3
  gone    the addon_deleted waiter, describe-addon / delete-addon /
          describe-update failing with ResourceNotFoundException, list-addons

Every step checks the shapes botocore parsed (datetimes, status strings,
lists and maps), prints progress to stderr and, on success, one JSON object
on the last line of stdout. It exits 1 listing every failed check.
"""

import argparse
import datetime
import json
import re
import sys
import uuid

import botocore
import botocore.session
from botocore.config import Config
from botocore.exceptions import ClientError, WaiterError

ADDON = "saltbush-noop"
CREATE_CONFIG = '{"replicaCount": 2, "message": "hello from botocore"}'
UPDATE_CONFIG = '{"replicaCount": 3, "message": "updated by botocore"}'
TAGS = {"team": "platform", "client": "botocore"}
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class Checks:
    """Collects failed checks so one run reports all of them."""

    def __init__(self, step, allow_absent=False):
        self.step = step
        self.allow_absent = allow_absent
        self.failures = []
        self.warnings = []

    def check(self, cond, msg, *args):
        if not cond:
            self.failures.append(msg % args if args else msg)
        return cond

    def eq(self, got, want, what):
        return self.check(got == want, "%s = %r, want %r", what, got, want)

    def empty_list(self, shape, member, what):
        """shape[member], where AWS always sends a list, [] when empty. With
        --allow-absent-empty-lists an absent member counts as [] and is
        noted as a warning instead of failing."""
        if not isinstance(shape, dict):
            return None
        if member not in shape and self.allow_absent:
            self.warnings.append("%s has no %s member; AWS sends %s: []" % (what, member, member))
            return []
        return shape.get(member)

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

    def error(self, client, call, code, status, what, **fields):
        """call must fail with botocore's ClientError of code and HTTP status,
        also catchable as the client's modeled exception class."""
        try:
            out = call()
        except ClientError as e:
            err = e.response.get("Error", {})
            self.eq(err.get("Code"), code, what + ": Error.Code")
            self.check(bool(err.get("Message")), "%s: empty Error.Message in %r", what, e.response)
            self.eq(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode"), status, what + ": HTTP status")
            modeled = getattr(client.exceptions, code, None)
            self.check(modeled is not None and isinstance(e, modeled),
                       "%s: %s is not client.exceptions.%s", what, type(e).__name__, code)
            # botocore copies a modeled error's members to the response top level.
            for k, v in fields.items():
                self.eq(e.response.get(k), v, "%s: error member %s" % (what, k))
            log("%s: %s (%s)", what, err.get("Code"), err.get("Message"))
            return e
        self.failures.append("%s: succeeded with %r, want %s" % (what, out, code))
        return None

    def finish(self, result):
        if self.failures:
            print("step %s: %d check(s) failed:" % (self.step, len(self.failures)), file=sys.stderr)
            for f in self.failures:
                print("  - " + f, file=sys.stderr)
            sys.exit(1)
        for w in self.warnings:
            log("WARNING: %s", w)
        result["step"] = self.step
        result["warnings"] = self.warnings
        result["botocore"] = botocore.__version__
        print(json.dumps(result, sort_keys=True))


def log(fmt, *args):
    print("botocore_addon: " + (fmt % args if args else fmt), file=sys.stderr, flush=True)


def new_client(endpoint):
    session = botocore.session.get_session()
    return session.create_client(
        "eks",
        region_name="us-east-1",
        endpoint_url=endpoint,
        # Credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY:
        # the key saltbush made for its development administrator.
        # One attempt: a failure must show, not hide in a retry.
        config=Config(retries={"max_attempts": 1, "mode": "standard"},
                      connect_timeout=5, read_timeout=30),
    )


def check_addon(c, a, cluster, status, config, what):
    """The Addon shape every describe returns."""
    c.eq(a.get("addonName"), ADDON, what + ".addonName")
    c.eq(a.get("clusterName"), cluster, what + ".clusterName")
    c.eq(a.get("status"), status, what + ".status")
    c.check(isinstance(a.get("status"), str), "%s.status is %r, want a str", what, a.get("status"))
    c.eq(a.get("addonVersion"), "v1.0.0-eksbuild.1", what + ".addonVersion")
    arn = a.get("addonArn", "")
    prefix = "arn:aws:eks:us-east-1:"
    c.check(arn.startswith(prefix) and (":addon/%s/%s/" % (cluster, ADDON)) in arn
            and UUID_RE.match(arn.rsplit("/", 1)[-1]) is not None,
            "%s.addonArn = %r, want arn:aws:eks:us-east-1:{account}:addon/%s/%s/{uuid}", what, arn, cluster, ADDON)
    c.datetime_now(a.get("createdAt"), what + ".createdAt")
    c.datetime_now(a.get("modifiedAt"), what + ".modifiedAt")
    c.eq(a.get("tags"), TAGS, what + ".tags")
    c.eq(a.get("configurationValues"), config, what + ".configurationValues")
    c.eq(a.get("publisher"), "saltbush", what + ".publisher")
    c.eq(a.get("owner"), "saltbush", what + ".owner")
    c.eq(a.get("namespaceConfig"), {"namespace": "saltbush-noop"}, what + ".namespaceConfig")
    health = a.get("health")
    c.check(isinstance(health, dict) and isinstance(c.empty_list(health, "issues", what + ".health"), list),
            "%s.health = %r, want {'issues': [...]}", what, health)
    return (health or {}).get("issues") or []


def check_update(c, u, status, what):
    c.check(isinstance(u.get("id"), str) and UUID_RE.match(u.get("id", "")) is not None,
            "%s.id = %r, want a UUID", what, u.get("id"))
    c.eq(u.get("status"), status, what + ".status")
    c.eq(u.get("type"), "AddonUpdate", what + ".type")
    c.datetime_now(u.get("createdAt"), what + ".createdAt")
    params = u.get("params")
    c.check(isinstance(params, list), "%s.params = %r, want a list", what, params)
    c.check({"type": "ConfigurationValues", "value": UPDATE_CONFIG} in (params or []),
            "%s.params = %r, want a ConfigurationValues param with the new values", what, params)
    c.eq(c.empty_list(u, "errors", what), [], what + ".errors")


def describe(eks, cluster):
    return eks.describe_addon(clusterName=cluster, addonName=ADDON)["addon"]


def step_create(eks, c, args):
    token = str(uuid.uuid4())
    req = dict(clusterName=args.cluster, addonName=ADDON, addonVersion="v1.0.0-eksbuild.1",
               configurationValues=CREATE_CONFIG, tags=TAGS, clientRequestToken=token)
    out = eks.create_addon(**req)
    c.eq(out["ResponseMetadata"]["HTTPStatusCode"], 200, "create-addon HTTP status")
    a = out["addon"]
    issues = check_addon(c, a, args.cluster, "CREATING", CREATE_CONFIG, "create-addon addon")
    c.eq(issues, [], "create-addon health.issues")
    arn = a.get("addonArn")
    log("created %s (%s)", arn, a.get("status"))

    # Same token, same parameters: the same add-on, not a second one.
    again = eks.create_addon(**req)["addon"]
    c.eq(again.get("addonArn"), arn, "replayed create-addon addonArn")
    c.eq(again.get("createdAt"), a.get("createdAt"), "replayed create-addon createdAt")
    # A new token for an existing name: ResourceInUseException.
    c.error(eks, lambda: eks.create_addon(**dict(req, clientRequestToken=str(uuid.uuid4()))),
            "ResourceInUseException", 409, "create-addon of an existing add-on",
            clusterName=args.cluster, addonName=ADDON)
    # The same token with other parameters is refused.
    c.error(eks, lambda: eks.create_addon(**dict(req, configurationValues=UPDATE_CONFIG)),
            "InvalidParameterException", 400, "create-addon reusing a token with new parameters")

    d = describe(eks, args.cluster)
    check_addon(c, d, args.cluster, "CREATING", CREATE_CONFIG, "describe-addon addon")
    c.eq(d.get("addonArn"), arn, "describe-addon addonArn")

    # Error parsing.
    c.error(eks, lambda: eks.describe_addon(clusterName=args.cluster, addonName="coredns"),
            "ResourceNotFoundException", 404, "describe-addon of an absent add-on",
            clusterName=args.cluster, addonName="coredns")
    c.error(eks, lambda: eks.describe_addon(clusterName="no-such-cluster", addonName=ADDON),
            "ResourceNotFoundException", 404, "describe-addon on an absent cluster")
    c.error(eks, lambda: eks.create_addon(clusterName=args.cluster, addonName=ADDON,
                                          configurationValues='{"noSuchKey": true}'),
            "InvalidParameterException", 400, "create-addon with configurationValues outside the schema")
    c.finish({"addonArn": arn, "clientRequestToken": token})


def step_update(eks, c, args):
    d = describe(eks, args.cluster)
    issues = check_addon(c, d, args.cluster, "DEGRADED", CREATE_CONFIG, "describe-addon addon")
    if c.eq(len(issues), 1, "describe-addon health.issues count"):
        i = issues[0]
        c.eq(i.get("code"), "InsufficientNumberOfReplicas", "health.issues[0].code")
        c.check(isinstance(i.get("message"), str) and i.get("message"),
                "health.issues[0].message = %r, want a message", i.get("message"))
        c.eq(i.get("resourceIds"), ["saltbush-noop/noop"], "health.issues[0].resourceIds")

    out = eks.update_addon(clusterName=args.cluster, addonName=ADDON,
                           configurationValues=UPDATE_CONFIG, clientRequestToken=str(uuid.uuid4()))
    u = out["update"]
    check_update(c, u, "InProgress", "update-addon update")
    uid = u.get("id", "")
    c.check(not uid.startswith("arn:"), "update id %r is an ARN, want an id of its own", uid)
    log("update %s %s", uid, u.get("status"))

    du = eks.describe_update(name=args.cluster, updateId=uid, addonName=ADDON)["update"]
    check_update(c, du, "InProgress", "describe-update update")
    lu = eks.list_updates(name=args.cluster, addonName=ADDON)
    c.check(uid in lu.get("updateIds", []), "list-updates updateIds = %r, want it to hold %s", lu.get("updateIds"), uid)
    c.error(eks, lambda: eks.describe_update(name=args.cluster, updateId=str(uuid.uuid4()), addonName=ADDON),
            "ResourceNotFoundException", 404, "describe-update of an unknown id")

    d = describe(eks, args.cluster)
    check_addon(c, d, args.cluster, "UPDATING", UPDATE_CONFIG, "describe-addon addon while updating")
    c.finish({"updateId": uid})


def step_delete(eks, c, args):
    du = eks.describe_update(name=args.cluster, updateId=args.update_id, addonName=ADDON)["update"]
    check_update(c, du, "Successful", "describe-update update")

    try:
        eks.get_waiter("addon_active").wait(clusterName=args.cluster, addonName=ADDON,
                                            WaiterConfig={"Delay": 1, "MaxAttempts": 5})
    except WaiterError as e:
        c.failures.append("addon_active waiter: %s" % e)
    d = describe(eks, args.cluster)
    issues = check_addon(c, d, args.cluster, "ACTIVE", UPDATE_CONFIG, "describe-addon addon")
    c.eq(issues, [], "describe-addon health.issues after READY")
    la = eks.list_addons(clusterName=args.cluster)
    c.check(ADDON in la.get("addons", []), "list-addons addons = %r, want it to hold %s", la.get("addons"), ADDON)

    out = eks.delete_addon(clusterName=args.cluster, addonName=ADDON)
    check_addon(c, out["addon"], args.cluster, "DELETING", UPDATE_CONFIG, "delete-addon addon")
    d = describe(eks, args.cluster)
    check_addon(c, d, args.cluster, "DELETING", UPDATE_CONFIG, "describe-addon addon while deleting")
    log("deleting %s", d.get("addonArn"))
    c.finish({"status": d.get("status")})


def step_gone(eks, c, args):
    try:
        eks.get_waiter("addon_deleted").wait(clusterName=args.cluster, addonName=ADDON,
                                             WaiterConfig={"Delay": 1, "MaxAttempts": 5})
    except WaiterError as e:
        c.failures.append("addon_deleted waiter: %s" % e)
    c.error(eks, lambda: eks.describe_addon(clusterName=args.cluster, addonName=ADDON),
            "ResourceNotFoundException", 404, "describe-addon after removal",
            clusterName=args.cluster, addonName=ADDON)
    c.error(eks, lambda: eks.delete_addon(clusterName=args.cluster, addonName=ADDON),
            "ResourceNotFoundException", 404, "delete-addon after removal",
            clusterName=args.cluster, addonName=ADDON)
    c.error(eks, lambda: eks.describe_update(name=args.cluster, updateId=args.update_id, addonName=ADDON),
            "ResourceNotFoundException", 404, "describe-update of a removed add-on")
    la = eks.list_addons(clusterName=args.cluster)
    c.check(ADDON not in la.get("addons", []), "list-addons addons = %r still holds %s", la.get("addons"), ADDON)
    c.finish({"addons": la.get("addons", [])})


STEPS = {"create": step_create, "update": step_update, "delete": step_delete, "gone": step_gone}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", required=True, help="the façade's base URL")
    p.add_argument("--cluster", required=True, help="an ACTIVE cluster's name")
    p.add_argument("--step", required=True, choices=sorted(STEPS))
    p.add_argument("--update-id", default="", help="the update id the update step printed")
    p.add_argument("--allow-absent-empty-lists", action="store_true",
                   help="accept an absent health.issues / update errors member where AWS sends []"
                        " (warn instead of failing)")
    args = p.parse_args()
    if args.step in ("delete", "gone") and not args.update_id:
        p.error("--update-id is required for step " + args.step)
    log("botocore %s, step %s against %s", botocore.__version__, args.step, args.endpoint)
    STEPS[args.step](new_client(args.endpoint), Checks(args.step, args.allow_absent_empty_lists), args)


if __name__ == "__main__":
    main()
