package token

// Hosts is the STS host allow-list: the host names (with port, if any, as
// they appear in the URL) a token's presigned URL may name. The signature
// covers the host, so the list does not protect the signature; it keeps
// the verifier to the URLs aws-iam-authenticator would have sent to STS,
// so that a token saltbush accepts is one AWS would accept too.
type Hosts map[string]bool

// commercialRegions are the regions of the AWS commercial partition
// ("aws") that have a regional STS endpoint, as the AWS SDK's endpoint
// list names them. A new region is added here when AWS opens it; until
// then its tokens need DefaultHosts' extra argument.
var commercialRegions = [...]string{
	"us-east-1", "us-east-2", "us-west-1", "us-west-2",
	"af-south-1",
	"ap-east-1", "ap-east-2",
	"ap-northeast-1", "ap-northeast-2", "ap-northeast-3",
	"ap-south-1", "ap-south-2",
	"ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4",
	"ap-southeast-5", "ap-southeast-6", "ap-southeast-7",
	"ca-central-1", "ca-west-1",
	"eu-central-1", "eu-central-2",
	"eu-north-1",
	"eu-south-1", "eu-south-2",
	"eu-west-1", "eu-west-2", "eu-west-3",
	"il-central-1",
	"me-central-1", "me-south-1",
	"mx-central-1",
	"sa-east-1",
}

// DefaultHosts returns the global STS host sts.amazonaws.com, the
// regional hosts sts.{region}.amazonaws.com and
// sts-fips.{region}.amazonaws.com of every commercial region, and extra:
// a private cloud may front STS under its own host name, and its clients
// then sign for that name.
func DefaultHosts(extra ...string) Hosts {
	h := make(Hosts, 1+2*len(commercialRegions)+len(extra))
	h["sts.amazonaws.com"] = true
	for _, r := range commercialRegions {
		h["sts."+r+".amazonaws.com"] = true
		h["sts-fips."+r+".amazonaws.com"] = true
	}
	for _, e := range extra {
		h[e] = true
	}
	return h
}
