/* Wine 8 has no bcryptprimitives.dll, whose ProcessPrng Rust's std (>= 1.78) imports on Windows.
 * This stand-in exports ProcessPrng and fills the buffer from advapi32's RtlGenRandom
 * (SystemFunction036), whose length argument is a ULONG: large requests go in chunks. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG n = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!SystemFunction036(data, n))
            return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
