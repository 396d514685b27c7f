module mvdan.cc/sh/v3

go 1.23

require (
	golang.org/x/sys v0.30.0
	golang.org/x/term v0.29.0
)
