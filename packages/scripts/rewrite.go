package scripts

import (
	"fmt"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// The interpreter asks the host for a few things a script may do: the
// owner tests of [[ ]] (the build user), process substitution (a FIFO in
// the host's TMPDIR), $$ and $PPID (host pids), and file descriptors
// above 2 (which it cannot redirect). Before a script runs, and whenever
// it hands the interpreter more code (eval, ., trap, alias), its syntax
// tree is rewritten so these reach a handler that answers from the image,
// or a handler that refuses, naming the package and script:
//   - [[ -O f ]], [[ -G f ]] and [[ a -ef b ]] become [[ -n "$(stamp-filetest ...)" ]];
//   - <(cmds) becomes $({ cmds; } | stamp-procsubst), the output kept in
//     memory under /dev/fd/N for the command that reads it; >(cmds) is
//     refused;
//   - $$ and $PPID read variables that hold fixed numbers;
//   - a redirection of descriptor 3 or above to /dev/null, or its
//     duplication from or closing, is dropped (no handler reads another
//     descriptor); any other use of such a descriptor is refused when the
//     statement runs, as is <>.

// Names the rewritten tree uses.
const (
	fileTestCmd  = "stamp-filetest"
	procSubstCmd = "stamp-procsubst"
	refuseCmd    = "stamp-refuse"
	pidVar       = "STAMP_SHELL_PID"
	ppidVar      = "STAMP_SHELL_PPID"
	testArgVar   = "STAMP_TEST_ARG"
)

func lit(s string) *syntax.Word { return &syntax.Word{Parts: []syntax.WordPart{&syntax.Lit{Value: s}}} }

func call(args ...*syntax.Word) *syntax.Stmt {
	return &syntax.Stmt{Cmd: &syntax.CallExpr{Args: args}}
}

// cmdSubst is "$(stmts)" as a word.
func cmdSubst(stmts ...*syntax.Stmt) *syntax.Word {
	return &syntax.Word{Parts: []syntax.WordPart{&syntax.DblQuoted{Parts: []syntax.WordPart{&syntax.CmdSubst{Stmts: stmts}}}}}
}

// refusal is a word that, when expanded, stops the script as unhandled.
func refusal(what string) *syntax.Word {
	return cmdSubst(call(lit(refuseCmd), &syntax.Word{Parts: []syntax.WordPart{&syntax.SglQuoted{Value: strings.ReplaceAll(what, "'", "")}}}))
}

// param is "$name".
func param(name string) *syntax.Word {
	return &syntax.Word{Parts: []syntax.WordPart{&syntax.DblQuoted{Parts: []syntax.WordPart{&syntax.ParamExp{Param: &syntax.Lit{Value: name}}}}}}
}

// rewrite changes f in place as described above.
func rewrite(f *syntax.File) {
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.TestClause:
			n.X = rewriteTest(n.X)
		case *syntax.Stmt:
			n.Redirs = rewriteRedirs(n.Redirs)
		case *syntax.Word:
			for i, p := range n.Parts {
				if ps, ok := p.(*syntax.ProcSubst); ok {
					n.Parts[i] = procSubst(ps)
				}
			}
		case *syntax.ParamExp:
			if n.Param != nil && (n.Param.Value == "$" || n.Param.Value == "PPID") {
				name := pidVar
				if n.Param.Value == "PPID" {
					name = ppidVar
				}
				n.Param = &syntax.Lit{Value: name}
				n.Short = false
			}
		}
		return true
	})
}

// procSubst is the word a process substitution becomes.
func procSubst(ps *syntax.ProcSubst) syntax.WordPart {
	if ps.Op != syntax.CmdIn {
		return refusal("process substitution " + ps.Op.String() + "...)").Parts[0]
	}
	block := &syntax.Stmt{Cmd: &syntax.Block{Stmts: ps.Stmts}}
	pipe := &syntax.Stmt{Cmd: &syntax.BinaryCmd{Op: syntax.Pipe, X: block, Y: call(lit(procSubstCmd))}}
	return &syntax.CmdSubst{Stmts: []*syntax.Stmt{pipe}}
}

// rewriteTest replaces the [[ ]] operators the interpreter answers from the
// host.
func rewriteTest(e syntax.TestExpr) syntax.TestExpr {
	switch e := e.(type) {
	case *syntax.BinaryTest:
		if e.Op == syntax.TsDevIno {
			return fileTestCall("-ef", e.X, e.Y)
		}
		e.X, e.Y = rewriteTest(e.X), rewriteTest(e.Y)
	case *syntax.UnaryTest:
		switch e.Op {
		case syntax.TsUsrOwn:
			return fileTestCall("-O", e.X)
		case syntax.TsGrpOwn:
			return fileTestCall("-G", e.X)
		}
		e.X = rewriteTest(e.X)
	case *syntax.ParenTest:
		e.X = rewriteTest(e.X)
	}
	return e
}

// fileTestCall is [[ -n "$(A=x; B=y; stamp-filetest OP "$A" "$B")" ]]: the
// operands are expanded as assignments are, without splitting or
// globbing, as [[ ]] expands them.
func fileTestCall(op string, operands ...syntax.TestExpr) syntax.TestExpr {
	var stmts []*syntax.Stmt
	args := []*syntax.Word{lit(fileTestCmd), lit(op)}
	for i, o := range operands {
		w, ok := o.(*syntax.Word)
		if !ok {
			// An operand that is itself an expression is a syntax error
			// in bash; the test is then false.
			return lit("")
		}
		name := testArgVar + strconv.Itoa(i)
		stmts = append(stmts, &syntax.Stmt{Cmd: &syntax.CallExpr{Assigns: []*syntax.Assign{{Name: &syntax.Lit{Value: name}, Value: w}}}})
		args = append(args, param(name))
	}
	stmts = append(stmts, call(args...))
	return &syntax.UnaryTest{Op: syntax.TsNempStr, X: cmdSubst(stmts...)}
}

// rewriteRedirs keeps the redirections the interpreter does on descriptors
// 0 to 2 and drops or refuses the others.
func rewriteRedirs(rs []*syntax.Redirect) []*syntax.Redirect {
	var out []*syntax.Redirect
	for _, rd := range rs {
		n := 1
		if rd.Op == syntax.RdrIn || rd.Op == syntax.DplIn || rd.Op == syntax.Hdoc || rd.Op == syntax.DashHdoc || rd.Op == syntax.WordHdoc {
			n = 0
		}
		if rd.N != nil {
			v, err := strconv.Atoi(rd.N.Value)
			if err != nil {
				rd.N, rd.Op, rd.Word, rd.Hdoc = nil, syntax.RdrOut, refusal("redirection of file descriptor "+rd.N.Value), nil
				out = append(out, rd)
				continue
			}
			n = v
		}
		target := ""
		if rd.Word != nil {
			target = rd.Word.Lit()
		}
		dup := rd.Op == syntax.DplIn || rd.Op == syntax.DplOut
		switch {
		case n > 2 && (target == "/dev/null" && !dup || dup && (target == "-" || target == "0" || target == "1" || target == "2")):
			// Nothing reads that descriptor: the redirection changes
			// nothing a handler sees.
			continue
		case n > 2:
			rd.N, rd.Op, rd.Word, rd.Hdoc = nil, syntax.RdrOut, refusal(fmt.Sprintf("redirection of file descriptor %d", n)), nil
		case rd.Op == syntax.RdrInOut:
			rd.Op, rd.Word = syntax.RdrIn, refusal("redirection <> (read and write)")
		case rd.Op == syntax.RdrClob:
			rd.Op = syntax.RdrOut
		case dup && target == "-":
		case dup && rd.Op == syntax.DplOut && (target == "1" || target == "2"):
		case dup && rd.Op == syntax.DplIn && target == "0":
			continue
		case rd.Op == syntax.DplOut && rd.N == nil && target != "" && !isNumber(target):
			// >&file is &>file.
			rd.Op = syntax.RdrAll
		case dup && target != "":
			rd.Word = refusal(fmt.Sprintf("redirection %s%s", rd.Op, target))
		case dup:
			// Decided when it runs: $fd may be 2 or 7.
			rd.Word = cmdSubst(call(lit("stamp-fd"), lit(rd.Op.String()), &syntax.Word{Parts: rd.Word.Parts}))
		}
		out = append(out, rd)
	}
	return out
}

// reprint is code the interpreter is handed at run time (eval, ., trap,
// alias), rewritten; ok is false when it does not parse, and the
// interpreter then says so itself.
func reprint(code string) (string, bool) {
	f, err := syntax.NewParser().Parse(strings.NewReader(code), "")
	if err != nil {
		return "", false
	}
	rewrite(f)
	var b strings.Builder
	if err := syntax.NewPrinter().Print(&b, f); err != nil {
		return "", false
	}
	return b.String(), true
}

func isNumber(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}
