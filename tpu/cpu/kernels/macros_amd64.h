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

