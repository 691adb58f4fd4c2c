"""``indep_throttle_status``: the ASIC-independent throttler bits (SMU_THROTTLER_*_BIT in swsmu/inc/amdgpu_smu.h).

Each SMU driver translates its firmware's own ``throttle_status`` bits into these (smu_cmn_get_indep_throttler_status)
so one table serves every chip. Four groups: power 0-7, current 16-23, temperature 32-47, other 56-57. The field is
in gpu_metrics v1.3, v2.2, v2.3 and v2.4.
"""

from __future__ import annotations

THROTTLER_BITS: dict[int, str] = {
    # power
    0: "PPT0",
    1: "PPT1",
    2: "PPT2",
    3: "PPT3",
    4: "SPL",
    5: "FPPT",
    6: "SPPT",
    7: "SPPT_APU",
    # current
    16: "TDC_GFX",
    17: "TDC_SOC",
    18: "TDC_MEM",
    19: "TDC_VDD",
    20: "TDC_CVIP",
    21: "EDC_CPU",
    22: "EDC_GFX",
    23: "APCC",
    # temperature
    32: "TEMP_GPU",
    33: "TEMP_CORE",
    34: "TEMP_MEM",
    35: "TEMP_EDGE",
    36: "TEMP_HOTSPOT",
    37: "TEMP_SOC",
    38: "TEMP_VR_GFX",
    39: "TEMP_VR_SOC",
    40: "TEMP_VR_MEM0",
    41: "TEMP_VR_MEM1",
    42: "TEMP_LIQUID0",
    43: "TEMP_LIQUID1",
    44: "VRHOT0",
    45: "VRHOT1",
    46: "PROCHOT_CPU",
    47: "PROCHOT_GFX",
    # other
    56: "PPM",
    57: "FIT",
}


def throttle_reasons(indep_throttle_status: int | None) -> tuple[str, ...]:
    """The names of the set bits, lowest bit first; a bit the kernel does not define is ``BIT<n>``.

    None (the all-ones "not available" marker) gives no reasons: it is not a value with every bit set.
    """
    if indep_throttle_status is None or indep_throttle_status < 0:
        return ()
    return tuple(
        THROTTLER_BITS.get(bit, f"BIT{bit}")
        for bit in range(indep_throttle_status.bit_length())
        if indep_throttle_status >> bit & 1
    )
