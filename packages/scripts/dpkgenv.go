package scripts

// MaintainerEnv is what dpkg sets for a maintainer script it runs itself;
// dpkg-maintscript-helper refuses to work without it.
func MaintainerEnv(pkg, script, arch string) []string {
	return []string{"DPKG_MAINTSCRIPT_PACKAGE=" + pkg, "DPKG_MAINTSCRIPT_NAME=" + script,
		"DPKG_MAINTSCRIPT_ARCH=" + arch, "DPKG_MAINTSCRIPT_PACKAGE_REFCOUNT=1",
		"DPKG_ROOT=", "DPKG_ADMINDIR=/var/lib/dpkg", "DPKG_RUNNING_VERSION=1.21.22"}
}

// ChrootEnv is added to a sandbox's environment for maintainer scripts
// that run for real, as apt runs them: noninteractive debconf, root's home.
//
// PYTHONDONTWRITEBYTECODE keeps the interpreter from caching the modules
// it imports: py3compile imports its own (debpython, and any .pth hook such
// as _distutils_hack) and Python would write timestamp .pycs for them that
// record when the tree was unpacked, so two builds differ. py3compile
// then skips a source whose timestamp .pyc matches it, so those caches
// would also shadow the ones it is asked for. py_compile and compileall,
// which py3compile drives, ignore the variable and honour
// SOURCE_DATE_EPOCH (hash-based .pycs), so every .pyc a package asks for
// is still written, reproducibly.
func ChrootEnv() []string {
	return []string{"LC_ALL=C.UTF-8", "HOME=/root", "SHELL=/bin/sh",
		"DEBIAN_FRONTEND=noninteractive", "DEBCONF_NONINTERACTIVE_SEEN=true",
		"PYTHONDONTWRITEBYTECODE=1"}
}
