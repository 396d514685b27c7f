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
	imageVarName = "STAMP_IMAGE_VAR"
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
			// A job put in the background (cmd &) would go on changing the
			// tree after the script, or the build, has moved on: the
			// interpreter never waits for it unless the script says
			// wait. It runs in its place instead, as a sequential run
			// of the same commands would.
			n.Background = false
			switch c := n.Cmd.(type) {
			case *syntax.CoprocClause, *syntax.TestDecl:
				// Constructs the interpreter does not run.
				n.Cmd = &syntax.CallExpr{Args: []*syntax.Word{lit(refuseCmd), lit("a coproc or bats test")}}
			case *syntax.ForClause:
				if c.Select {
					// It reads a choice from a terminal there is none of.
					n.Cmd = &syntax.CallExpr{Args: []*syntax.Word{lit(refuseCmd), lit("select")}}
				}
			case *syntax.DeclClause:
				// declare, export, readonly... with no name print every
				// variable, $PWD as the interpreter keeps it among them.
				listing := true
				for _, a := range c.Args {
					if a.Name != nil || a.Value == nil || a.Value.Lit() != "-p" {
						listing = false
					}
				}
				if listing {
					n.Cmd = &syntax.CallExpr{Args: []*syntax.Word{lit(refuseCmd), lit(c.Variant.Value + " listing every variable")}}
				}
			}
		case *syntax.Word:
			rewriteParts(n.Parts)
		case *syntax.DblQuoted:
			rewriteParts(n.Parts)
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

// rewriteParts replaces, in a word or a double-quoted string, the parts
// the interpreter would answer from the host (process substitution, $PWD
// and $OLDPWD, which it keeps as the tree's host path) or cannot expand
// (extended globs, the @ operators it does not know).
func rewriteParts(parts []syntax.WordPart) {
	for i, p := range parts {
		switch p := p.(type) {
		case *syntax.ProcSubst:
			parts[i] = procSubst(p)
		case *syntax.ExtGlob:
			parts[i] = refusal("extended glob").Parts[0]
		case *syntax.ParamExp:
			if p.Exp != nil && p.Exp.Op == syntax.OtherParamOps && p.Exp.Word.Lit() != "E" {
				parts[i] = refusal("parameter expansion @" + p.Exp.Word.Lit()).Parts[0]
				continue
			}
			if p.Param != nil && (p.Param.Value == "PWD" || p.Param.Value == "OLDPWD") {
				parts[i] = imageVar(p)
			}
		}
	}
}

// imageVar is $(STAMP_VAR=$(stamp-var NAME); printf %s "${STAMP_VAR...}"):
// the expansion p on the variable's image value.
func imageVar(p *syntax.ParamExp) syntax.WordPart {
	name := p.Param.Value
	q := *p
	q.Param, q.Short = &syntax.Lit{Value: imageVarName}, false
	set := &syntax.Stmt{Cmd: &syntax.CallExpr{Assigns: []*syntax.Assign{{Name: &syntax.Lit{Value: imageVarName},
		Value: cmdSubst(call(lit("stamp-var"), lit(name)))}}}}
	print := call(lit("printf"), lit("%s"), &syntax.Word{Parts: []syntax.WordPart{&syntax.DblQuoted{Parts: []syntax.WordPart{&q}}}})
	return &syntax.CmdSubst{Stmts: []*syntax.Stmt{set, print}}
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
		switch e.Op {
		case syntax.TsDevIno:
			return fileTestCall("-ef", e.X, e.Y)
		case syntax.TsNewer:
			return fileTestCall("-nt", e.X, e.Y)
		case syntax.TsOlder:
			return fileTestCall("-ot", e.X, e.Y)
		}
		e.X, e.Y = rewriteTest(e.X), rewriteTest(e.Y)
	case *syntax.UnaryTest:
		if op := e.Op.String(); unaryFileOps[op] {
			// Every file operator: the interpreter would join a relative
			// operand with the tree's host path and ask the host for some.
			return fileTestCall(op, e.X)
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
		case rd.Op != syntax.RdrIn && rd.Op != syntax.RdrOut && rd.Op != syntax.AppOut && rd.Op != syntax.RdrAll &&
			rd.Op != syntax.AppAll && rd.Op != syntax.ClbOut && !dup && rd.Op != syntax.Hdoc && rd.Op != syntax.DashHdoc && rd.Op != syntax.WordHdoc:
			rd.Op, rd.Word, rd.Hdoc = syntax.RdrOut, refusal("redirection "+rd.Op.String()), nil
		case rd.Op == syntax.ClbOut:
			rd.Op = syntax.RdrOut
		case dup && target == "-":
		case dup && rd.Op == syntax.DplOut && (target == "1" || target == "2"):
		case dup && rd.Op == syntax.DplIn && target == "0":
			continue
		case rd.Op == syntax.DplOut && rd.N == nil && target != "" && !isNumber(target):
			// >&file is &>file.
			rd.Op = syntax.RdrAll
		case dup && target != "":
			rd.Op, rd.Word = syntax.RdrOut, refusal(fmt.Sprintf("redirection %s%s", rd.Op, target))
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
