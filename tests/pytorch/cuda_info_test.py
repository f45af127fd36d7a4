"""torch.cuda on the simulated driver: availability, device count, properties, mem_get_info.

Usage: cuda_info_test.py --devices N --device-memory BYTES [--virtual]
--virtual: under libmemshim.so, mem_get_info reports the virtual capacity (device budget plus
host tier), which must exceed the device's memory; otherwise it reports the device's memory.
"""
import argparse

import torch

from harness import check, finish, parse_bytes

parser = argparse.ArgumentParser()
parser.add_argument("--devices", type=int, required=True)
parser.add_argument("--device-memory", type=parse_bytes, required=True)
parser.add_argument("--virtual", action="store_true")
args = parser.parse_args()

check(torch.cuda.is_available(), "torch.cuda.is_available()")
check(torch.cuda.device_count() == args.devices, "device_count() matches MEMSIM_DEVICE_COUNT",
      torch.cuda.device_count())
for d in range(torch.cuda.device_count()):
    props = torch.cuda.get_device_properties(d)
    check(props.major == 9 and props.minor == 0, "device %d compute capability 9.0" % d)
    check(props.total_memory == args.device_memory, "device %d total_memory" % d,
          props.total_memory)
    free, total = torch.cuda.mem_get_info(d)
    if args.virtual:
        check(total > args.device_memory, "device %d mem_get_info reports the virtual capacity" % d,
              total)
    else:
        check(total == args.device_memory, "device %d mem_get_info reports the device" % d, total)
    check(0 < free <= total, "device %d free memory within total" % d, free)
x = torch.arange(1 << 20, dtype=torch.int32)
check(torch.equal(x.cuda().cpu(), x), "a tensor survives a round trip through the device")
finish()
