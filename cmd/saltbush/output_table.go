package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// table is one block of `-o table` output. A record (no header) is one
// "Name:  value" line per field, as kubectl describe prints one object; a
// list (a header) is one row per item under upper-case column names, as
// kubectl get prints many. Either may have a title line above it.
type table struct {
	title  string
	header []string
	rows   [][]string
	// empty is printed instead of a list without rows ("No agent
	// sessions."); a list without rows and without it prints nothing.
	empty string
}

// field is one line of a record.
type field struct{ name, value string }

// record is a table of fields.
func record(title string, fields ...field) table {
	t := table{title: title}
	for _, f := range fields {
		t.rows = append(t.rows, []string{f.name + ":", f.value})
	}
	return t
}

// noValue stands for an empty cell, so that every column of a row has a
// word in it (kubectl prints <none>): a reader, or a script splitting on
// blanks, never sees columns shift.
const noValue = "-"

// cell makes s fit one cell: a line break or a tab would tear the table.
func cell(s string) string {
	if s == "" {
		return noValue
	}
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' || r == '\t' }), " ")
}

// tableTime is how a table shows an instant: absolute and in UTC, so that
// output pasted into a ticket means the same everywhere. (An age like
// kubectl's "5m" would be stale once pasted.)
const tableTime = "2006-01-02 15:04:05 UTC"

// timeCell shows a timestamp; unset is noValue.
func timeCell(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return noValue
	}
	return ts.AsTime().UTC().Format(tableTime)
}

// epochCell shows seconds since the epoch; 0 (never) is noValue.
func epochCell(secs int64) string {
	if secs == 0 {
		return noValue
	}
	return time.Unix(secs, 0).UTC().Format(tableTime)
}

// enumCell shows an enum value as AWS names it; UNSPECIFIED is noValue.
func enumCell(e protoreflect.Enum) string {
	if e.Number() == 0 {
		return noValue
	}
	if ev := e.Descriptor().Values().ByNumber(e.Number()); ev != nil {
		return enumValueName(ev)
	}
	return strconv.Itoa(int(e.Number()))
}

// yesNo shows a flag.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// joined shows a list of words on one line.
func joined(items []string) string {
	return cell(strings.Join(items, ", "))
}

// writeTables writes the blocks, each aligned on its own (text/tabwriter,
// two spaces between columns), with a blank line between blocks. A block
// that prints nothing leaves no blank line either.
func writeTables(w io.Writer, tables []table) error {
	first := true
	for _, t := range tables {
		if len(t.rows) == 0 && t.empty == "" {
			continue
		}
		if !first {
			if _, err := fmt.Fprintln(w); err != nil {
				return err
			}
		}
		first = false
		if t.title != "" {
			if _, err := fmt.Fprintln(w, t.title); err != nil {
				return err
			}
		}
		if len(t.rows) == 0 {
			if _, err := fmt.Fprintln(w, t.empty); err != nil {
				return err
			}
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		lines := t.rows
		if t.header != nil {
			lines = append([][]string{t.header}, t.rows...)
		}
		for _, row := range lines {
			cells := make([]string, len(row))
			for i, c := range row {
				cells[i] = cell(c)
			}
			if _, err := fmt.Fprintln(tw, strings.Join(cells, "\t")); err != nil {
				return err
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// genericTables is the table of a response no renderer knows (see
// tableRenderers): a record of its fields, nested messages flattened into
// it ("Executor instance id"), and a list for each repeated message field.
// It prints what -o json would, only flatter, so a new response is never
// unprintable.
func genericTables(m protoreflect.Message) []table {
	rec := table{}
	var lists []table
	var walk func(prefix string, m protoreflect.Message)
	walk = func(prefix string, m protoreflect.Message) {
		fields := m.Descriptor().Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			if fd.HasPresence() && !m.Has(fd) {
				continue
			}
			name := strings.TrimSpace(prefix + " " + words(fd.JSONName()))
			v := m.Get(fd)
			switch {
			case fd.IsList() && isNested(fd):
				lists = append(lists, listTable(sentence(name)+":", fd, v.List()))
			case fd.IsList() || fd.IsMap():
				rec.rows = append(rec.rows, []string{sentence(name) + ":", fieldCell(fd, v)})
			case isNested(fd):
				walk(name, v.Message())
			case fd.Kind() == protoreflect.EnumKind && v.Enum() == 0:
			default:
				rec.rows = append(rec.rows, []string{sentence(name) + ":", fieldCell(fd, v)})
			}
		}
	}
	walk("", m)
	return append([]table{rec}, lists...)
}

// isNested reports whether fd holds a message that is shown field by
// field (a Timestamp is one value).
func isNested(fd protoreflect.FieldDescriptor) bool {
	return (fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind) && !fd.IsMap() &&
		fd.Message().FullName() != timestampName
}

// listTable is a repeated message field as a list: one column per field of
// the message, one row per element.
func listTable(title string, fd protoreflect.FieldDescriptor, list protoreflect.List) table {
	fields := fd.Message().Fields()
	t := table{title: title}
	for i := range fields.Len() {
		t.header = append(t.header, strings.ToUpper(words(fields.Get(i).JSONName())))
	}
	for j := range list.Len() {
		item := list.Get(j).Message()
		row := make([]string, fields.Len())
		for i := range fields.Len() {
			f := fields.Get(i)
			if f.HasPresence() && !item.Has(f) {
				row[i] = noValue
				continue
			}
			row[i] = fieldCell(f, item.Get(f))
		}
		t.rows = append(t.rows, row)
	}
	return t
}

// fieldCell shows any field's value in one cell: lists joined, maps as
// k=v, timestamps and enums as tables show them, nested messages as
// compact JSON.
func fieldCell(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch {
	case fd.IsList():
		var items []string
		for j := range v.List().Len() {
			items = append(items, valueCell(fd, v.List().Get(j)))
		}
		return joined(items)
	case fd.IsMap():
		var items []string
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			items = append(items, k.String()+"="+valueCell(fd.MapValue(), mv))
			return true
		})
		sort.Strings(items)
		return joined(items)
	}
	return valueCell(fd, v)
}

// valueCell shows one singular value.
func valueCell(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return enumValueName(ev)
		}
		return strconv.Itoa(int(v.Enum()))
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if fd.Message().FullName() == timestampName {
			return timestampOf(v.Message()).Format(tableTime)
		}
		b, err := json.Marshal(messageValueDoc(v.Message()))
		if err != nil {
			return noValue
		}
		return string(b)
	}
	return cell(fmt.Sprint(singularDoc(fd, v)))
}

// words splits a lowerCamelCase name into lower-case words: clusterUid is
// "cluster uid".
func words(name string) string {
	var b strings.Builder
	for i, r := range name {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte(' ')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// sentence capitalizes the first letter.
func sentence(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}
