// memvirt-nvme-bench: the `memvirt-bench nvme` benchmark as a standalone binary.
#include "nvme_bench.h"

int main(int argc, char** argv) { return memvirt::bench::NvmeMain(argc, argv); }
