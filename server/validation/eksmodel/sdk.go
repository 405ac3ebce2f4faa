package eksmodel

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// SDKModule is the AWS SDK for Go v2's EKS module, a model source.
const SDKModule = "github.com/aws/aws-sdk-go-v2/service/eks"

// ReadSDK reads the model the AWS SDK for Go v2's EKS module in dir was
// generated from, as far as the module carries it:
//   - schemas/schemas.go: every shape's type, every structure's members with
//     their REST locations (httpLabel, httpQuery, httpHeader), list and map
//     elements, and every operation's HTTP binding;
//   - api_op_*.go: each operation's input shape (NewOperationSchema);
//   - types/enums.go: enum values (an enum schema names its members, not
//     their values: ClusterVersionStatus's standard_support is
//     "standard-support");
//   - validators.go: required members.
//
// The module carries no lengths, ranges or patterns and no operation's
// errors: those come from botocore (Merge).
func ReadSDK(dir string) (*Model, error) {
	fset := token.NewFileSet()
	schemas, err := parser.ParseFile(fset, filepath.Join(dir, "schemas", "schemas.go"), nil, 0)
	if err != nil {
		return nil, fmt.Errorf("the SDK's schemas: %w", err)
	}
	r := &sdkReader{
		model: &Model{
			Metadata:   Metadata{APIVersion: "2017-11-01", Protocol: "rest-json"},
			Operations: map[string]Operation{},
			Shapes:     map[string]Shape{},
		},
		shapeOf: map[string]string{},
		ops:     map[string]HTTP{},
	}
	if err := r.readSchemas(schemas); err != nil {
		return nil, err
	}
	ops, err := filepath.Glob(filepath.Join(dir, "api_op_*.go"))
	if err != nil {
		return nil, err
	}
	inputs := map[string]string{} // Go input type (CancelUpdateInput) -> shape
	for _, path := range ops {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return nil, fmt.Errorf("the SDK's operations: %w", err)
		}
		if err := r.readOperation(f, inputs); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
		}
	}
	for name := range r.ops {
		if _, ok := r.model.Operations[name]; !ok {
			return nil, fmt.Errorf("the SDK's operation %s has no NewOperationSchema in its api_op file", name)
		}
	}
	enums, err := parser.ParseFile(fset, filepath.Join(dir, "types", "enums.go"), nil, 0)
	if err != nil {
		return nil, fmt.Errorf("the SDK's enums: %w", err)
	}
	if err := r.readEnums(enums); err != nil {
		return nil, err
	}
	validators, err := parser.ParseFile(fset, filepath.Join(dir, "validators.go"), nil, 0)
	if err != nil {
		return nil, fmt.Errorf("the SDK's validators: %w", err)
	}
	if err := r.readRequired(validators, inputs); err != nil {
		return nil, err
	}
	return r.model, nil
}

type sdkReader struct {
	model *Model
	// shapeOf maps a schema variable (_ClusterName) to its shape
	// (ClusterName).
	shapeOf map[string]string
	// ops are the operations' HTTP bindings, by operation name.
	ops map[string]HTTP
	// enums are the enum shapes, whose values types/enums.go gives.
	enums []string
}

// shapeTypes maps smithy-go's shape types to service-2.json's; an enum is
// a string with values.
var shapeTypes = map[string]string{
	"ShapeTypeBlob": "blob", "ShapeTypeBoolean": "boolean", "ShapeTypeString": "string",
	"ShapeTypeTimestamp": "timestamp", "ShapeTypeByte": "integer", "ShapeTypeShort": "integer",
	"ShapeTypeInteger": "integer", "ShapeTypeLong": "long", "ShapeTypeFloat": "float",
	"ShapeTypeDouble": "double", "ShapeTypeList": "list", "ShapeTypeMap": "map",
	"ShapeTypeStructure": "structure", "ShapeTypeEnum": "string", "ShapeTypeIntEnum": "integer",
}

func (r *sdkReader) readSchemas(f *ast.File) error {
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				vs, ok := spec.(*ast.ValueSpec)
				if !ok || len(vs.Values) != 1 {
					continue
				}
				if err := r.readSchema(vs.Names[0].Name, vs.Values[0]); err != nil {
					return fmt.Errorf("schema %s: %w", vs.Names[0].Name, err)
				}
			}
		case *ast.FuncDecl:
			if d.Name.Name != "init" {
				continue
			}
			for _, stmt := range d.Body.List {
				if err := r.readMember(stmt); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// readSchema reads `var X = smithy.NewSchema(smithy.ShapeID{…, Name: "N"},
// smithy.ShapeTypeT, n, traits…)`.
func (r *sdkReader) readSchema(varName string, value ast.Expr) error {
	call, ok := value.(*ast.CallExpr)
	if !ok || selectorName(call.Fun) != "NewSchema" || len(call.Args) < 2 {
		return nil
	}
	id, ok := call.Args[0].(*ast.CompositeLit)
	if !ok {
		return fmt.Errorf("the shape ID is not a literal")
	}
	name := stringField(id, "Name")
	if name == "" {
		return fmt.Errorf("the shape ID has no Name")
	}
	typ := selectorName(call.Args[1])
	switch typ {
	case "ShapeTypeService":
		return nil
	case "ShapeTypeOperation":
		for _, arg := range call.Args[2:] {
			if lit := traitLiteral(arg); lit != nil && selectorName(lit.Type) == "HTTP" {
				r.ops[name] = HTTP{Method: stringField(lit, "Method"), RequestURI: stringField(lit, "URI")}
				return nil
			}
		}
		return fmt.Errorf("operation %s has no HTTP trait", name)
	}
	t, ok := shapeTypes[typ]
	if !ok {
		return fmt.Errorf("shape type %s is not supported", typ)
	}
	r.shapeOf[varName] = name
	r.model.Shapes[name] = Shape{Type: t}
	if typ == "ShapeTypeEnum" {
		r.enums = append(r.enums, name)
	}
	return nil
}

// readMember reads `A_m = A.AddMember("m", Target, traits…)`.
func (r *sdkReader) readMember(stmt ast.Stmt) error {
	as, ok := stmt.(*ast.AssignStmt)
	if !ok || len(as.Rhs) != 1 {
		return nil
	}
	call, ok := as.Rhs[0].(*ast.CallExpr)
	if !ok || selectorName(call.Fun) != "AddMember" || len(call.Args) < 2 {
		return nil
	}
	parent, ok := call.Fun.(*ast.SelectorExpr).X.(*ast.Ident)
	if !ok {
		return fmt.Errorf("AddMember on %T", call.Fun.(*ast.SelectorExpr).X)
	}
	owner, ok := r.shapeOf[parent.Name]
	if !ok {
		return fmt.Errorf("AddMember on %s, which is no shape", parent.Name)
	}
	member, err := stringLiteral(call.Args[0])
	if err != nil {
		return fmt.Errorf("member of %s: %w", owner, err)
	}
	s := r.model.Shapes[owner]
	if s.Type == "string" && selectorName(call.Args[1]) == "Unit" {
		return nil // an enum's member: its value is in types/enums.go
	}
	target, ok := call.Args[1].(*ast.Ident)
	if !ok {
		return fmt.Errorf("member %s.%s: target %T", owner, member, call.Args[1])
	}
	ref := Ref{Shape: r.shapeOf[target.Name]}
	if ref.Shape == "" {
		return fmt.Errorf("member %s.%s: target %s is no shape", owner, member, target.Name)
	}
	switch s.Type {
	case "list":
		s.Member = &ref
	case "map":
		if member == "key" {
			s.Key = &ref
		} else {
			s.Value = &ref
		}
	case "structure":
		for _, arg := range call.Args[2:] {
			lit := traitLiteral(arg)
			if lit == nil {
				continue
			}
			switch selectorName(lit.Type) {
			case "HTTPLabel":
				ref.Location, ref.LocationName = "uri", member
			case "HTTPQuery":
				ref.Location, ref.LocationName = "querystring", stringField(lit, "Name")
			case "HTTPHeader":
				ref.Location, ref.LocationName = "header", stringField(lit, "Name")
			}
		}
		if s.Members == nil {
			s.Members = map[string]Ref{}
		}
		s.Members[member] = ref
	default:
		return fmt.Errorf("member %s.%s of a %s", owner, member, s.Type)
	}
	r.model.Shapes[owner] = s
	return nil
}

// readOperation finds `smithy.NewOperationSchema(schemas.Op,
// schemas.OpRequest, schemas.OpResponse)` and the operation's input type
// (the second parameter of the client's method).
func (r *sdkReader) readOperation(f *ast.File, inputs map[string]string) error {
	var err error
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || selectorName(call.Fun) != "NewOperationSchema" || len(call.Args) != 3 || err != nil {
			return true
		}
		op, in := selectorName(call.Args[0]), selectorName(call.Args[1])
		h, known := r.ops[op]
		if !known {
			err = fmt.Errorf("NewOperationSchema of %s, which is no operation schema", op)
			return false
		}
		input := r.shapeOf[in]
		if input == "" {
			err = fmt.Errorf("operation %s: input %s is no shape", op, in)
			return false
		}
		r.model.Operations[op] = Operation{HTTP: h, Input: &Ref{Shape: input}}
		inputs[op+"Input"] = input
		return true
	})
	return err
}

// readEnums reads each `func (T) Values() []T { return []T{"a", …} }`.
func (r *sdkReader) readEnums(f *ast.File) error {
	values := map[string][]string{}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "Values" || fd.Recv == nil || len(fd.Body.List) != 1 {
			continue
		}
		recv, ok := fd.Recv.List[0].Type.(*ast.Ident)
		if !ok {
			continue
		}
		ret, ok := fd.Body.List[0].(*ast.ReturnStmt)
		if !ok || len(ret.Results) != 1 {
			return fmt.Errorf("%s.Values does not return one list", recv.Name)
		}
		lit, ok := ret.Results[0].(*ast.CompositeLit)
		if !ok {
			return fmt.Errorf("%s.Values does not return a literal", recv.Name)
		}
		for _, e := range lit.Elts {
			bl, ok := e.(*ast.BasicLit)
			if !ok || bl.Kind != token.STRING {
				return fmt.Errorf("%s.Values holds a %T", recv.Name, e)
			}
			v, err := strconv.Unquote(bl.Value)
			if err != nil {
				return fmt.Errorf("%s.Values: %w", recv.Name, err)
			}
			values[recv.Name] = append(values[recv.Name], v)
		}
	}
	for _, name := range r.enums {
		v, ok := values[name]
		if !ok {
			// Go exports the type of a shape named in lower case
			// (configStatus is types.ConfigStatus).
			v, ok = values[strings.ToUpper(name[:1])+name[1:]]
		}
		if !ok {
			return fmt.Errorf("enum %s has no Values in types/enums.go", name)
		}
		s := r.model.Shapes[name]
		s.Enum = v
		r.model.Shapes[name] = s
	}
	return nil
}

// readRequired reads the validators: `func validateOpXInput(v *XInput)`
// and `func validateX(v *types.X)` add NewErrParamRequired("Field") for
// each required member, named by its Go field (the member's name with
// the first letter upper-cased).
func (r *sdkReader) readRequired(f *ast.File, inputs map[string]string) error {
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Recv != nil || !strings.HasPrefix(fd.Name.Name, "validate") || len(fd.Type.Params.List) != 1 {
			continue
		}
		star, ok := fd.Type.Params.List[0].Type.(*ast.StarExpr)
		if !ok {
			continue // a list or map validator: it validates elements
		}
		var shape string
		switch t := star.X.(type) {
		case *ast.Ident:
			shape = inputs[t.Name]
		case *ast.SelectorExpr:
			shape = t.Sel.Name
		}
		s, ok := r.model.Shapes[shape]
		if !ok || s.Type != "structure" {
			return fmt.Errorf("validator %s: its parameter is no structure of the model", fd.Name.Name)
		}
		var err error
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || selectorName(call.Fun) != "NewErrParamRequired" || len(call.Args) != 1 || err != nil {
				return true
			}
			field, uerr := stringLiteral(call.Args[0])
			if uerr != nil {
				err = uerr
				return false
			}
			member := ""
			for name := range s.Members {
				if strings.EqualFold(name, field) {
					member = name
				}
			}
			if member == "" {
				err = fmt.Errorf("validator %s: %s requires %s, which is no member", fd.Name.Name, shape, field)
				return false
			}
			s.Required = append(s.Required, member)
			return true
		})
		if err != nil {
			return err
		}
		sort.Strings(s.Required)
		r.model.Shapes[shape] = s
	}
	return nil
}

// selectorName is the name an expression ends in: NewSchema for
// smithy.NewSchema, X for X.
func selectorName(e ast.Expr) string {
	switch v := e.(type) {
	case *ast.SelectorExpr:
		return v.Sel.Name
	case *ast.Ident:
		return v.Name
	}
	return ""
}

// traitLiteral is the composite literal of a trait argument
// (&smithytraits.HTTPQuery{Name: "x"}), nil for anything else.
func traitLiteral(e ast.Expr) *ast.CompositeLit {
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.AND {
		e = u.X
	}
	lit, _ := e.(*ast.CompositeLit)
	return lit
}

// stringLiteral is the value of a string literal argument.
func stringLiteral(e ast.Expr) (string, error) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", fmt.Errorf("a %T where a string literal belongs", e)
	}
	return strconv.Unquote(bl.Value)
}

// stringField is the string value of a keyed field of a literal.
func stringField(lit *ast.CompositeLit, key string) string {
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok || selectorName(kv.Key) != key {
			continue
		}
		if bl, ok := kv.Value.(*ast.BasicLit); ok && bl.Kind == token.STRING {
			s, err := strconv.Unquote(bl.Value)
			if err == nil {
				return s
			}
		}
	}
	return ""
}
