package recipes

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Error is one problem in a recipe. Parse returns every one it finds, joined
// with errors.Join; errors.As(err, new(*Error)) tells an invalid recipe
// (exit 2) from an unreadable file.
type Error struct {
	File   string
	Line   int // 1-based; 0 when unknown
	Column int // 1-based; 0 when unknown
	Field  string
	Msg    string
}

// Error formats as "FILE:LINE: FIELD: MSG", leaving out the parts that are unknown.
func (e *Error) Error() string {
	s := e.File
	if e.Line > 0 {
		s += ":" + strconv.Itoa(e.Line)
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	return s + ": " + e.Msg
}

// UsageError is a request that cannot be carried out as given: a recipe
// with the options, flags or files it is built with (a --cache-sign without
// --cache-to, a Secure Boot key that does not read). The CLI exits 2 for it,
// as for an Error; the conductor and verify both return it.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// IsUsage reports whether err comes from an invalid recipe (Error) or a
// request that cannot be carried out as given (UsageError), the cases the
// CLI exits 2 for.
func IsUsage(err error) bool {
	var re *Error
	if errors.As(err, &re) {
		return true
	}
	var ue *UsageError
	return errors.As(err, &ue)
}

// maxErrors bounds the list so a badly broken file does not produce pages.
const maxErrors = 50

var parserProblems = []string{
	"did not find expected <", "did not find expected node content", "did not find expected '-' indicator",
	"did not find expected key", "did not find expected ',' or", "found duplicate %", "found incompatible YAML document",
	"found undefined tag handle",
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns a yaml.v3 parser error into an *Error with the line.
func syntaxError(file string, err error) *Error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		// yaml.v3 reports parser (not scanner) errors with a 0-based line;
		// these are the parser's messages.
		for _, p := range parserProblems {
			if strings.HasPrefix(m[2], p) {
				line++
				break
			}
		}
		return &Error{File: file, Line: line, Msg: "invalid YAML: " + m[2]}
	}
	return &Error{File: file, Msg: fmt.Sprintf("invalid YAML: %s", trimYAMLPrefix(msg))}
}

func trimYAMLPrefix(s string) string {
	const p = "yaml: "
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// join returns nil for no errors, the error itself for one, errors.Join otherwise.
func join(errs []*Error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	list := make([]error, len(errs))
	for i, e := range errs {
		list[i] = e
	}
	return errors.Join(list...)
}
