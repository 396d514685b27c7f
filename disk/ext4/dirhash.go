package ext4

import "math/bits"

// The directory index hashes names with ext4's "half MD4" (s_def_hash_version
// 1) and the signed-char variant (s_flags signed_directory_hash, what
// mke2fs writes on x86). The hash only decides where entries go; the kernel
// and e2fsck recompute it from the superblock, so it must match theirs bit
// for bit.

// dxHash returns the major hash (low bit clear) and the minor hash of name.
func dxHash(name string, seed [4]uint32) (uint32, uint32) {
	buf := [4]uint32{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476}
	if seed != [4]uint32{} {
		buf = seed
	}
	var in [8]uint32
	for p := name; len(p) > 0; {
		str2hashbuf(p, &in)
		halfMD4(&buf, &in)
		if len(p) <= 32 {
			break
		}
		p = p[32:]
	}
	return buf[1] &^ 1, buf[2]
}

// str2hashbuf packs up to 32 bytes of msg, as signed chars, into in; unused
// words are filled with a pattern made of the remaining length.
func str2hashbuf(msg string, in *[8]uint32) {
	n := len(msg)
	pad := uint32(n) | uint32(n)<<8
	pad |= pad << 16
	val := pad
	n = min(n, 32)
	j := 0
	for i := 0; i < n; i++ {
		val = uint32(int32(int8(msg[i]))) + val<<8
		if i%4 == 3 {
			in[j] = val
			j++
			val = pad
		}
	}
	if j < 8 {
		in[j] = val
		j++
	}
	for ; j < 8; j++ {
		in[j] = pad
	}
}

func halfMD4(buf *[4]uint32, in *[8]uint32) {
	const k2, k3 = 0x5A827999, 0x6ED9EBA1
	f := func(x, y, z uint32) uint32 { return z ^ (x & (y ^ z)) }
	g := func(x, y, z uint32) uint32 { return (x & y) + ((x ^ y) & z) }
	h := func(x, y, z uint32) uint32 { return x ^ y ^ z }
	a, b, c, d := buf[0], buf[1], buf[2], buf[3]
	r := func(fn func(x, y, z uint32) uint32, a *uint32, b, c, d, x uint32, s int) {
		*a = bits.RotateLeft32(*a+fn(b, c, d)+x, s)
	}

	r(f, &a, b, c, d, in[0], 3)
	r(f, &d, a, b, c, in[1], 7)
	r(f, &c, d, a, b, in[2], 11)
	r(f, &b, c, d, a, in[3], 19)
	r(f, &a, b, c, d, in[4], 3)
	r(f, &d, a, b, c, in[5], 7)
	r(f, &c, d, a, b, in[6], 11)
	r(f, &b, c, d, a, in[7], 19)

	r(g, &a, b, c, d, in[1]+k2, 3)
	r(g, &d, a, b, c, in[3]+k2, 5)
	r(g, &c, d, a, b, in[5]+k2, 9)
	r(g, &b, c, d, a, in[7]+k2, 13)
	r(g, &a, b, c, d, in[0]+k2, 3)
	r(g, &d, a, b, c, in[2]+k2, 5)
	r(g, &c, d, a, b, in[4]+k2, 9)
	r(g, &b, c, d, a, in[6]+k2, 13)

	r(h, &a, b, c, d, in[3]+k3, 3)
	r(h, &d, a, b, c, in[7]+k3, 9)
	r(h, &c, d, a, b, in[2]+k3, 11)
	r(h, &b, c, d, a, in[6]+k3, 15)
	r(h, &a, b, c, d, in[1]+k3, 3)
	r(h, &d, a, b, c, in[5]+k3, 9)
	r(h, &c, d, a, b, in[0]+k3, 11)
	r(h, &b, c, d, a, in[4]+k3, 15)

	buf[0] += a
	buf[1] += b
	buf[2] += c
	buf[3] += d
}
