package seal

// crc32cCombine returns the CRC-32C (Castagnoli, as hash/crc32 computes
// it) of the concatenation A B from crcA = CRC(A), crcB = CRC(B) and the
// length of B: how the pieces of a checkpoint file, read and checked in
// parallel, give the whole file's checksum its manifest states. It is
// zlib's crc32_combine with the Castagnoli polynomial: the CRC register
// after A is advanced over lenB zero bytes (a linear map over GF(2),
// applied by repeated squaring), then B's CRC is added.
func crc32cCombine(crcA, crcB uint32, lenB int64) uint32 {
	if lenB <= 0 {
		return crcA
	}
	var even, odd [32]uint32
	// odd: the operator for one zero bit.
	odd[0] = 0x82f63b78 // Castagnoli, reflected
	row := uint32(1)
	for i := 1; i < 32; i++ {
		odd[i] = row
		row <<= 1
	}
	gf2Square(&even, &odd) // two zero bits
	gf2Square(&odd, &even) // four zero bits
	// Apply len(B) zero bytes: the first square gives one byte (eight bits).
	for {
		gf2Square(&even, &odd)
		if lenB&1 != 0 {
			crcA = gf2Times(&even, crcA)
		}
		lenB >>= 1
		if lenB == 0 {
			break
		}
		gf2Square(&odd, &even)
		if lenB&1 != 0 {
			crcA = gf2Times(&odd, crcA)
		}
		lenB >>= 1
		if lenB == 0 {
			break
		}
	}
	return crcA ^ crcB
}

// gf2Times multiplies the 32x32 bit matrix mat by the vector vec.
func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

// gf2Square sets square to mat times mat.
func gf2Square(square, mat *[32]uint32) {
	for i := range 32 {
		square[i] = gf2Times(mat, mat[i])
	}
}
