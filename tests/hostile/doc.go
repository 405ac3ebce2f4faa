// Package hostile sends a corpus of malformed and hostile requests to a
// real in-process saltbush (embedded etcd, the real façade, real SigV4)
// as raw HTTP: every EKS operation the façade serves, the STS and IAM
// query-protocol operations on the same endpoint (AssumeRoleWithWebIdentity
// unsigned, as AWS answers it) and EKS Auth's AssumeRoleForPodIdentity
// beside it, with tokens of an issuer saltbush hosts. Each request must be
// refused the way AWS refuses it (the exception, the HTTP status, a
// message in AWS's words that names the member at fault and shows nothing
// of the implementation) and must leave the etcd keyspace exactly as it
// was (docs/architecture.md, "Errors"; docs/contracts.md, "Input
// validation").
package hostile
