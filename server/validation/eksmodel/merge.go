package eksmodel

import (
	"fmt"
	"slices"
	"sort"
)

// Provenance says which source alone gave one item of the merged model:
// an operation, a shape, a structure's member or an enum value. Items both
// sources have are not listed.
type Provenance struct {
	Item   string // "operation CancelUpdate", "member UpdateClusterVersionRequest.rollbackConfig", "enum Category ROLLBACK_READINESS"
	Source string
}

// sdkOnlyErrors are the errors of the operations the Go SDK has and the
// installed botocore lacks, as AWS's API reference lists them for each
// operation: the SDK's module carries every exception shape but not which
// operation answers which. Merge fails for an SDK-only operation missing
// here, so a newer SDK cannot add an operation whose errors nobody named.
var sdkOnlyErrors = map[string][]string{
	"ActivateCertificateAuthority": {"InvalidParameterException", "ResourceNotFoundException", "ServerException", "ServiceUnavailableException"},
	"CancelUpdate":                 {"ClientException", "InvalidParameterException", "InvalidRequestException", "InvalidStateException", "ResourceInUseException", "ResourceNotFoundException", "ServerException", "ThrottlingException"},
	"CreateCertificateAuthority":   {"InvalidParameterException", "ResourceInUseException", "ResourceLimitExceededException", "ResourceNotFoundException", "ServerException", "ServiceUnavailableException"},
	"DeleteCertificateAuthority":   {"InvalidParameterException", "ResourceInUseException", "ResourceNotFoundException", "ServerException", "ServiceUnavailableException"},
	"DescribeCertificateAuthority": {"ResourceNotFoundException", "ServerException", "ServiceUnavailableException"},
	"ListCertificateAuthorities":   {"InvalidParameterException", "ResourceNotFoundException", "ServerException", "ServiceUnavailableException"},
}

// sdkOnlyErrorsSource names where sdkOnlyErrors come from, for Provenance.
const sdkOnlyErrorsSource = "AWS's API reference (eksmodel.sdkOnlyErrors)"

// Merge is the newest model the two sources make together: whatever either
// has — operations, shapes, members, enum values — is in it, since a
// current client may send anything its own model has. botocore's is the
// base: it alone carries constraints and errors, so a shape both have keeps
// botocore's constraints, locations and required members (a member only
// the SDK has is required when the SDK says so). An operation only the SDK
// has takes its errors from sdkOnlyErrors. A shape whose type differs
// between the sources is an error: one of them is not EKS's model.
func Merge(boto *Model, botoName string, sdk *Model, sdkName string) (*Model, []Provenance, error) {
	out := &Model{Metadata: boto.Metadata, Operations: map[string]Operation{}, Shapes: map[string]Shape{}}
	var prov []Provenance
	for name, op := range boto.Operations {
		out.Operations[name] = op
		if _, ok := sdk.Operations[name]; !ok {
			prov = append(prov, Provenance{"operation " + name, botoName})
		}
	}
	for name, s := range boto.Shapes {
		out.Shapes[name] = s
	}
	for _, name := range SortedKeys(sdk.Operations) {
		op := sdk.Operations[name]
		if have, ok := out.Operations[name]; ok {
			if have.Input != nil && op.Input != nil && have.Input.Shape != op.Input.Shape {
				return nil, nil, fmt.Errorf("operation %s: input %s in %s, %s in %s", name, have.Input.Shape, botoName, op.Input.Shape, sdkName)
			}
			continue
		}
		errs, ok := sdkOnlyErrors[name]
		if !ok {
			return nil, nil, fmt.Errorf("operation %s is in %s only and its errors are unknown: add them to sdkOnlyErrors", name, sdkName)
		}
		for _, e := range errs {
			if _, ok := sdk.Shapes[e]; !ok {
				return nil, nil, fmt.Errorf("operation %s: error %s is no shape of %s", name, e, sdkName)
			}
			op.Errors = append(op.Errors, Ref{Shape: e})
		}
		out.Operations[name] = op
		prov = append(prov, Provenance{"operation " + name, sdkName}, Provenance{"errors of " + name, sdkOnlyErrorsSource})
	}
	for _, name := range SortedKeys(sdk.Shapes) {
		ns := sdk.Shapes[name]
		bs, ok := out.Shapes[name]
		if !ok {
			out.Shapes[name] = ns
			prov = append(prov, Provenance{"shape " + name, sdkName})
			continue
		}
		if !sameType(bs.Type, ns.Type) {
			return nil, nil, fmt.Errorf("shape %s: a %s in %s, a %s in %s", name, bs.Type, botoName, ns.Type, sdkName)
		}
		merged, p := mergeShape(name, bs, ns, botoName, sdkName)
		out.Shapes[name] = merged
		prov = append(prov, p...)
	}
	sort.Slice(prov, func(i, j int) bool { return prov[i].Item < prov[j].Item })
	return out, prov, nil
}

// sameType: botocore writes a Smithy long as "long", the SDK's schema as
// the same; integer and long are both whole numbers to a validator.
func sameType(a, b string) bool {
	whole := func(t string) bool { return t == "integer" || t == "long" }
	return a == b || whole(a) && whole(b)
}

func mergeShape(name string, bs, ns Shape, botoName, sdkName string) (Shape, []Provenance) {
	var prov []Provenance
	if len(bs.Enum) > 0 || len(ns.Enum) > 0 {
		enum := slices.Clone(bs.Enum)
		for _, v := range ns.Enum {
			if !slices.Contains(enum, v) {
				enum = append(enum, v)
				prov = append(prov, Provenance{"enum " + name + " " + v, sdkName})
			}
		}
		for _, v := range bs.Enum {
			if !slices.Contains(ns.Enum, v) {
				prov = append(prov, Provenance{"enum " + name + " " + v, botoName})
			}
		}
		bs.Enum = enum
	}
	if bs.Type != "structure" {
		return bs, prov
	}
	members := make(map[string]Ref, len(bs.Members)+len(ns.Members))
	for m, r := range bs.Members {
		members[m] = r
		if _, ok := ns.Members[m]; !ok {
			prov = append(prov, Provenance{"member " + name + "." + m, botoName})
		}
	}
	required := slices.Clone(bs.Required)
	for _, m := range SortedKeys(ns.Members) {
		if _, ok := members[m]; ok {
			continue
		}
		members[m] = ns.Members[m]
		prov = append(prov, Provenance{"member " + name + "." + m, sdkName})
		if slices.Contains(ns.Required, m) {
			required = append(required, m)
		}
	}
	bs.Members, bs.Required = members, required
	return bs, prov
}
