/*
 * bcryptprimitives.dll for wine 8.0, which lacks it: Go 1.22 and later
 * call ProcessPrng from it for random numbers at start, and a Go program
 * without it dies before main ("bcryptprimitives.dll not found"). This
 * one function, over RtlGenRandom, is all Go asks of it. Built by
 * scripts/wine-test.sh with Debian's gcc-mingw-w64-x86-64; used only to
 * run the Windows tests under wine, never shipped.
 */
#include <windows.h>
#include <ntsecapi.h>

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
	return RtlGenRandom(data, (ULONG)len);
}
