"""Drive saltbush's STS and IAM endpoint with boto3 (botocore underneath).

Usage: python3 boto3_sts.py ENDPOINT ROLE_ARN SESSION_NAME
The caller's keys come from the environment. Prints one JSON line: what
assume_role returned, get_caller_identity as the session, and the session's
view of an unanswered and a refused call.
"""
import json
import sys

import boto3
import botocore.config
import botocore.exceptions


def main():
    endpoint, role_arn, session_name = sys.argv[1:4]
    sts = boto3.client("sts", endpoint_url=endpoint, region_name="us-east-1")
    out = sts.assume_role(RoleArn=role_arn, RoleSessionName=session_name, DurationSeconds=900)
    creds = out["Credentials"]
    session = boto3.session.Session(
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
        region_name="us-east-1",
    )
    ident = session.client("sts", endpoint_url=endpoint).get_caller_identity()
    result = {
        "assumedRoleArn": out["AssumedRoleUser"]["Arn"],
        "assumedRoleId": out["AssumedRoleUser"]["AssumedRoleId"],
        "accessKeyId": creds["AccessKeyId"],
        "expiration": creds["Expiration"].isoformat(),
        "identity": {k: ident[k] for k in ("Arn", "UserId", "Account")},
    }
    # botocore checks lengths itself unless told not to: the server's own
    # check is what is tested.
    unchecked = boto3.client(
        "sts", endpoint_url=endpoint, region_name="us-east-1",
        config=botocore.config.Config(parameter_validation=False),
    )
    try:
        unchecked.assume_role(RoleArn=role_arn, RoleSessionName="x")
    except botocore.exceptions.ClientError as e:
        result["shortNameError"] = e.response["Error"]["Code"]
    try:
        session.client("iam", endpoint_url=endpoint).list_open_id_connect_providers()
    except botocore.exceptions.ClientError as e:
        result["iamError"] = e.response["Error"]["Code"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
