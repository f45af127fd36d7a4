// `memvirt-bench nvme`: sequential write then read throughput of the NVMe tier's io_uring engine
// (O_DIRECT, registered buffers and file), for comparison with fio on the same file system.
//
//   memvirt-bench nvme --file PATH [--block 2M] [--qd 16] [--size 1G] [--json] [--keep]
//                      [--read-only]   (read an existing file as it is; write_gbps is 0)
//                      [--store]       (through SwapStore: slabs of --block, CRC32C)
//                      [--no-register-buffers]
//
// Between the write and the read phase the file is flushed and the benchmark idles 1 s, untimed
// (Note [settle between phases] in nvme_bench.cc).
//
// Prints {"write_gbps":..,"read_gbps":..,"block":..,"qd":..,"bytes":..,"direct":..} with --json
// (GB/s are 1e9 bytes per second). The file is created 0600 if missing and removed afterwards
// unless it existed before or --keep is given. Returns the process exit code (0 on success,
// 1 on I/O or verification failure, 2 on bad flags).
//
// Thread safety: runs on the calling thread; not reentrant with itself on the same file.
#ifndef MEMVIRT_BENCH_NVME_NVME_BENCH_H_
#define MEMVIRT_BENCH_NVME_NVME_BENCH_H_

namespace memvirt::bench {

// argv[0] is the command's name (e.g. "memvirt-bench nvme"); flags follow.
int NvmeMain(int argc, char** argv);

}  // namespace memvirt::bench

#endif  // MEMVIRT_BENCH_NVME_NVME_BENCH_H_
