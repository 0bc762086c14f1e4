// Package keyslot computes Redis Cluster hash slots, so that multi-key scripts can be grouped
// by slot before they are sent.
package keyslot

// Count is the number of hash slots in a Redis Cluster.
const Count = 16384

// Of returns the hash slot of key: CRC16 (XMODEM) of its hash tag when it has a non-empty
// one (the part between the first '{' and the next '}'), of the whole key otherwise.
func Of(key string) uint16 {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					key = key[i+1 : j]
				}
				return crc16(key) % Count
			}
		}
		break
	}
	return crc16(key) % Count
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum Redis Cluster
// uses; computed bitwise because slots are taken once per renewal batch, not per command.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
