// Macros shared by the amd64 kernel files.

// REDUCE512 sums the 16 lanes of Z into the float32 at dst (clobbers Z15).
#define REDUCE512(Z, Y, X, dst) \
	VEXTRACTF64X4 $1, Z, Y15 \
	VADDPS        Y15, Y, Y  \
	VEXTRACTF128  $1, Y, X15 \
	VADDPS        X15, X, X  \
	VMOVHLPS      X, X, X15  \
	VADDPS        X15, X, X  \
	VMOVSHDUP     X, X15     \
	VADDSS        X15, X, X  \
	VMOVSS        X, dst

// REDUCE256 sums the 8 lanes of Y into the float32 at dst (clobbers Y15).
#define REDUCE256(Y, X, dst) \
	VEXTRACTF128 $1, Y, X15 \
	VADDPS       X15, X, X  \
	VMOVHLPS     X, X, X15  \
	VADDPS       X15, X, X  \
	VMOVSHDUP    X, X15     \
	VADDSS       X15, X, X  \
	VMOVSS       X, dst

// ROWRED512 reduces the four accumulators of one C row to four floats in XA
// (lanes j = 0..3). Clobbers Y24..Y27 and the other three accumulators.
#define ROWRED512(ZA, ZB, ZC, ZD, YA, YB, YC, YD, XA) \
	VEXTRACTF64X4 $1, ZA, Y24 \
	VEXTRACTF64X4 $1, ZB, Y25 \
	VEXTRACTF64X4 $1, ZC, Y26 \
	VEXTRACTF64X4 $1, ZD, Y27 \
	VADDPS        Y24, YA, YA \
	VADDPS        Y25, YB, YB \
	VADDPS        Y26, YC, YC \
	VADDPS        Y27, YD, YD \
	VHADDPS       YB, YA, YA  \
	VHADDPS       YD, YC, YC  \
	VHADDPS       YC, YA, YA  \
	VEXTRACTF32X4 $1, YA, X24 \
	VADDPS        X24, XA, XA
