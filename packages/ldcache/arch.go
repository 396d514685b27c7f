package ldcache

import (
	"encoding/binary"
	"strings"
)

// Library flags of glibc's ldconfig.h: the low byte is the library type, the
// second one the ABI the dynamic linker checks before using an entry.
const (
	flagAny     int32 = -1
	flagLibc4   int32 = 0x0000
	flagELF     int32 = 0x0001
	flagLibc5   int32 = 0x0002
	flagLibc6   int32 = 0x0003
	flagIA64    int32 = 0x0200
	flagX8664   int32 = 0x0300
	flagS390    int32 = 0x0400
	flagPPC64   int32 = 0x0500
	flagX32     int32 = 0x0800
	flagARMHF   int32 = 0x0900
	flagAArch64 int32 = 0x0a00
	flagARMSF   int32 = 0x0b00
	flagRVSoft  int32 = 0x0f00
	flagRVDbl   int32 = 0x1000
)

type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// family selects the architecture specific part of ldconfig's ELF reading
// (sysdeps/unix/sysv/linux/*/readelflib.c).
type family int

const (
	famX86 family = iota
	famARM
	famPPC
	famS390
	famRISCV
)

type knownName struct {
	name string
	flag int32
}

// archInfo is what differs between the ldconfig builds of the Debian
// architectures: byte order and word size of the program, the signedness of
// char (which _dl_cache_libcmp depends on for bytes >= 0x80), the built-in
// directories, and the names it recognises.
type archInfo struct {
	fam        family
	is64       bool // ldconfig's own word size, hence sizeof (ElfW(Ehdr))
	x86_64     bool // x86 only: the 64-bit build, which does not know IA-64
	order      byteOrder
	signedChar bool
	// systemDirs is SYSTEM_DIRS as Debian's local-ldconfig-multiarch.diff
	// feeds them to add_system_dir: with their trailing slash, which keeps
	// the lib64/libx32 expansion of some add_system_dir macros from firing.
	systemDirs   []string
	interpreters []knownName
	knownLibs    []knownName
	// Legacy hwcap subdirectory names (dl-procinfo): the hwcap names by bit,
	// the mask of the "important" ones, and the platform names.
	hwcapNames    []string
	hwcapMask     uint64
	platforms     []string
	firstPlatform int
	ppcPlatforms  bool // powerpc parses platform names itself
}

func systemDirs(triplet string) []string {
	return []string{"/lib/" + triplet + "/", "/usr/lib/" + triplet + "/", "/lib/", "/usr/lib/"}
}

func known(ldso string, extra ...knownName) []knownName {
	return append([]knownName{{"/lib/" + ldso, flagLibc6}}, extra...)
}

var libc6Libs = []knownName{
	{"libc.so.6", flagLibc6}, {"libm.so.6", flagLibc6},
	{"libc.so.6", flagLibc6}, {"libm.so.6", flagLibc6},
}

// x86: ldconfig is built to cover both i386 and x86-64 (dl-hwcap.h, IS_IN
// (ldconfig)), whichever it runs on.
var (
	x86Hwcaps    = []string{"sse2", "x86_64", "avx512_1"}
	x86Platforms = []string{"i586", "i686", "haswell", "xeon_phi"}
	arm64Hwcaps  = []string{"fp", "asimd", "evtstrm", "aes", "pmull", "sha1", "sha2", "crc32",
		"atomics", "fphp", "asimdhp", "cpuid", "asimdrdm", "jscvt", "fcma",
		"lrcpc", "dcpop", "sha3", "sm3", "sm4", "asimddp", "sha512", "sve",
		"asimdfhm", "dit", "uscat", "ilrcpc", "flagm", "ssbs", "sb", "paca",
		"pacg"}
	armHwcaps = []string{"swp", "half", "thumb", "26bit", "fastmult", "fpa", "vfp", "edsp",
		"java", "iwmmxt", "crunch", "thumbee", "neon", "vfpv3", "vfpv3d16",
		"tls", "vfpv4", "idiva", "idivt", "vfpd32", "lpae", "evtstrm",
		"aes", "pmull", "sha1", "sha2", "crc32"}
	ppcHwcaps = []string{"ppcle", "true_le", "", "",
		"", "", "archpmu", "vsx",
		"arch_2_06", "power6x", "dfp", "pa6t",
		"arch_2_05", "ic_snoop", "smt", "booke",
		"cellbe", "power5+", "power5", "power4",
		"notb", "efpdouble", "efpsingle", "spe",
		"ucache", "4xxmac", "mmu", "fpu",
		"altivec", "ppc601", "ppc64", "ppc32",
		"", "", "", "",
		"", "", "", "",
		"", "", "", "",
		"", "", "", "",
		"", "mma", "arch_3_1", "htm-no-suspend",
		"scv", "darn", "ieee128", "arch_3_00",
		"htm-nosc", "vcrypto", "tar", "isel",
		"ebb", "dscr", "htm", "arch_2_07"}
	s390Hwcaps = []string{"esan3", "zarch", "stfle", "msa", "ldisp", "eimm", "dfp", "edat", "etf3eh",
		"highgprs", "te", "vx", "vxd", "vxe", "gs", "vxe2", "vxp", "sort", "dflt",
		"vxp2", "nnpa", "pcimio", "sie"}
	s390Platforms = []string{"g5", "z900", "z990", "z9-109", "z10", "z196", "zEC12", "z13", "z14", "z15", "z16"}
)

var arches = map[string]*archInfo{
	"amd64": {
		fam: famX86, is64: true, x86_64: true, order: binary.LittleEndian, signedChar: true,
		systemDirs: systemDirs("x86_64-linux-gnu"),
		interpreters: known("ld-linux-x86-64.so.2",
			knownName{"/lib/ld-linux.so.2", flagLibc6},
			knownName{"/libx32/ld-linux-x32.so.2", flagLibc6},
			knownName{"/lib64/ld-linux-x86-64.so.2", flagLibc6}),
		knownLibs:  libc6Libs,
		hwcapNames: x86Hwcaps, hwcapMask: 7, platforms: x86Platforms, firstPlatform: 48,
	},
	"i386": {
		fam: famX86, order: binary.LittleEndian, signedChar: true,
		systemDirs: systemDirs("i386-linux-gnu"),
		interpreters: known("ld-linux.so.2",
			knownName{"/lib/ld-linux.so.1", flagLibc5}),
		knownLibs: []knownName{{"libc.so.6", flagLibc6}, {"libm.so.6", flagLibc6},
			{"libc.so.5", flagLibc5}, {"libm.so.5", flagLibc5}},
		hwcapNames: x86Hwcaps, hwcapMask: 7, platforms: x86Platforms, firstPlatform: 48,
	},
	"arm64": {
		fam: famARM, is64: true, order: binary.LittleEndian,
		systemDirs: systemDirs("aarch64-linux-gnu"),
		interpreters: known("ld-linux-aarch64.so.1",
			knownName{"/lib/ld-linux-aarch64.so.1", flagLibc6},
			knownName{"/lib/ld-linux-aarch64_be.so.1", flagLibc6},
			knownName{"/lib/ld-linux-aarch64_ilp32.so.1", flagLibc6},
			knownName{"/lib/ld-linux-aarch64_be_ilp32.so.1", flagLibc6},
			knownName{"/lib/ld-linux.so.3", flagLibc6},
			knownName{"/lib/ld-linux-armhf.so.3", flagLibc6}),
		knownLibs:  libc6Libs,
		hwcapNames: arm64Hwcaps, hwcapMask: 1 << 8,
	},
	"armhf": {
		fam: famARM, order: binary.LittleEndian,
		systemDirs: systemDirs("arm-linux-gnueabihf"),
		interpreters: known("ld-linux-armhf.so.3",
			knownName{"/lib/ld-linux.so.3", flagLibc6},
			knownName{"/lib/ld-linux-armhf.so.3", flagLibc6}),
		knownLibs:  libc6Libs,
		hwcapNames: armHwcaps, hwcapMask: 1<<6 | 1<<12,
	},
	"armel": {
		fam: famARM, order: binary.LittleEndian,
		systemDirs: systemDirs("arm-linux-gnueabi"),
		interpreters: known("ld-linux.so.3",
			knownName{"/lib/ld-linux.so.3", flagLibc6},
			knownName{"/lib/ld-linux-armhf.so.3", flagLibc6}),
		knownLibs:  libc6Libs,
		hwcapNames: armHwcaps, hwcapMask: 1<<6 | 1<<12,
	},
	"ppc64el": {
		fam: famPPC, is64: true, order: binary.LittleEndian,
		systemDirs: systemDirs("powerpc64le-linux-gnu"),
		interpreters: known("ld64.so.2",
			knownName{"/lib/ld.so.1", flagLibc6},
			knownName{"/lib64/ld64.so.1", flagLibc6},
			knownName{"/lib64/ld64.so.2", flagLibc6}),
		knownLibs:  libc6Libs,
		hwcapNames: ppcHwcaps, hwcapMask: 0x10000000 | 0x400, ppcPlatforms: true, firstPlatform: 32,
	},
	"s390x": {
		fam: famS390, is64: true, order: binary.BigEndian,
		systemDirs: systemDirs("s390x-linux-gnu"),
		interpreters: known("ld64.so.1",
			knownName{"/lib/ld.so.1", flagLibc6},
			knownName{"/lib/ld64.so.1", flagLibc6}),
		knownLibs:  libc6Libs,
		hwcapNames: s390Hwcaps, hwcapMask: 1<<1 | 1<<4 | 1<<5 | 1<<6 | 1<<11 | 1<<13 | 1<<15,
		platforms: s390Platforms, firstPlatform: 32,
	},
	"riscv64": {
		fam: famRISCV, is64: true, order: binary.LittleEndian,
		systemDirs: systemDirs("riscv64-linux-gnu"),
		interpreters: known("ld-linux-riscv64-lp64d.so.1",
			knownName{"/lib/ld-linux-riscv64-lp64d.so.1", flagLibc6},
			knownName{"/lib/ld-linux-riscv64-lp64.so.1", flagLibc6}),
		knownLibs: libc6Libs,
	},
}

// stringHwcap is _dl_string_hwcap: the bit of a hwcap name, or -1.
func (a *archInfo) stringHwcap(name string) int {
	for i, n := range a.hwcapNames {
		if n == name {
			return i
		}
	}
	return -1
}

// stringPlatform is _dl_string_platform: the bit of a platform name, or -1.
func (a *archInfo) stringPlatform(name string) int {
	if a.ppcPlatforms {
		return ppcPlatform(name, a.firstPlatform)
	}
	for i, n := range a.platforms {
		if n == name {
			return a.firstPlatform + i
		}
	}
	return -1
}

func ppcPlatform(s string, first int) int {
	if rest, ok := strings.CutPrefix(s, "power"); ok {
		var ret int
		switch rest {
		case "10":
			ret = 15
		case "4":
			ret = 0
		case "5":
			ret = 2
		case "5+":
			ret = 3
		case "6":
			ret = 4
		case "6x":
			ret = 6
		case "7":
			ret = 7
		case "8":
			ret = 13
		case "9":
			ret = 14
		default:
			return -1
		}
		return first + ret
	}
	if rest, ok := strings.CutPrefix(s, "ppc"); ok {
		switch rest {
		case "970":
			return first + 1
		case "-cell-be":
			return first + 5
		case "a2":
			return first + 8
		case "405":
			return first + 9
		case "440":
			return first + 10
		case "464":
			return first + 11
		case "476":
			return first + 12
		}
	}
	return -1
}

// isHwcapPlatform is ldconfig's is_hwcap_platform: whether a subdirectory
// of a library directory is searched as a legacy hwcap directory.
func (a *archInfo) isHwcapPlatform(name string) bool {
	if i := a.stringHwcap(name); i != -1 && i < 31 && (uint64(1)<<i)&a.hwcapMask != 0 {
		return true
	}
	if a.stringPlatform(name) != -1 {
		return true
	}
	return name == "tls"
}

// pathHwcap is ldconfig's path_hwcap: the hwcap bits the trailing
// components of a directory's path stand for ("tls" is bit 63).
func (a *archInfo) pathHwcap(p string) uint64 {
	var hwcap uint64
	for {
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			break
		}
		name := p[i+1:]
		h := a.stringHwcap(name)
		if h == -1 {
			h = a.stringPlatform(name)
			if h == -1 {
				if name != "tls" {
					break
				}
				h = 63
			}
		}
		hwcap += uint64(1) << uint(h)
		p = p[:i]
	}
	return hwcap
}

// isDSO is _dl_is_dso: lib*.so*, ld-*.so*, ld.so.*, ld64.so.*.
func isDSO(name string) bool {
	return ((strings.HasPrefix(name, "lib") || strings.HasPrefix(name, "ld-")) && strings.Contains(name, ".so")) ||
		strings.HasPrefix(name, "ld.so.") || strings.HasPrefix(name, "ld64.so.")
}

// libcmp is _dl_cache_libcmp: runs of digits compare as numbers (and above
// any other character), everything else bytewise as the platform's char.
func libcmp(p1, p2 string, signedChar bool) int32 {
	ch := func(s string, k int) int32 {
		if k >= len(s) {
			return 0
		}
		if signedChar {
			return int32(int8(s[k]))
		}
		return int32(s[k])
	}
	digit := func(c int32) bool { return c >= '0' && c <= '9' }
	i, j := 0, 0
	for ch(p1, i) != 0 {
		c1, c2 := ch(p1, i), ch(p2, j)
		switch {
		case digit(c1):
			if !digit(c2) {
				return 1
			}
			v1, v2 := c1-'0', c2-'0'
			i++
			j++
			for digit(ch(p1, i)) {
				v1 = v1*10 + ch(p1, i) - '0'
				i++
			}
			for digit(ch(p2, j)) {
				v2 = v2*10 + ch(p2, j) - '0'
				j++
			}
			if v1 != v2 {
				return v1 - v2
			}
		case digit(c2):
			return -1
		case c1 != c2:
			return c1 - c2
		default:
			i++
			j++
		}
	}
	return ch(p1, i) - ch(p2, j)
}
