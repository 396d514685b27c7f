// Package order works out the sequence in which apt-get install has dpkg
// unpack and configure packages, and the order in which dpkg then runs
// each package's scripts, so that an install done offline runs every
// maintainer script when a real one does.
//
// The order is an output like any other: a script that adds an account
// takes the next free id and appends its lines, systemd-sysusers writes a
// shadow file the next postinst extends, dpkg records trigger interests in
// unpack order. Two installs of the same packages in another order give
// other bytes.
//
// Apt plans the dpkg calls (apt.go): its order list sorts the packages by
// score and name and orders them in four passes by Pre-Depends, Conflicts
// and Depends (apt-pkg/orderlist.cc); its package manager then unpacks
// each, configuring at once what is Essential or depended on by what is,
// and what a Pre-Depends needs (apt-pkg/packagemanager.cc); its dpkg
// driver runs each stretch of the same action as one dpkg call, the last
// being dpkg --configure --pending (apt-pkg/deb/dpkgpm.cc). Dpkg (dpkg.go)
// runs a call's queue: a package whose dependencies are not configured yet
// waits for the end of the queue, dependency cycles are broken after a
// round without progress, --pending takes the packages in the order of its
// name hash table, and triggers wait for a round of their own
// (src/main/packages.c, configure.c, depcon.c, trigproc.c of dpkg 1.21).
//
// Both follow apt 2.6 and dpkg 1.21 (Debian 12), for installs on one
// architecture without removals; the tests hold the plans to what the
// host's apt and dpkg do.
package order
