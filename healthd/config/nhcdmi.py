"""NHC's DMI lines (check_dmi_data_match) made from /sys/class/dmi/id: for import-nhc and the host check.

NHC 1.4.3 (scripts/lbnl_dmi.nhc, ``nhc_dmi_gather_data``) turns each line of ``dmidecode``
into ``TYPE: FIELD: value`` (``BIOS Information: Version: 2.11.0``) and passes a match when
any line matches it, NHC's way (a glob, or a ``/regex/``). The kernel exports a few of those
strings, one file each (drivers/firmware/dmi-id.c); only a match that can meet no other line
than one of them is judged here, so that a line dmidecode prints and sysfs lacks never
decides a verdict. ``field_file`` says which file, or why a match cannot be judged.
"""

from __future__ import annotations

import re

# (dmidecode's type string, its field) -> the dmi-id attribute (drivers/firmware/dmi-id.c) holding
# the same string. Left out: UUID (dmidecode prints it in capitals, the kernel in small letters)
# and Chassis Type (the kernel gives its number, dmidecode its name).
DMI_FIELDS: dict[tuple[str, str], str] = {
    ("BIOS Information", "Vendor"): "bios_vendor",
    ("BIOS Information", "Version"): "bios_version",
    ("BIOS Information", "Release Date"): "bios_date",
    ("BIOS Information", "BIOS Revision"): "bios_release",
    ("BIOS Information", "Firmware Revision"): "ec_firmware_release",
    ("System Information", "Manufacturer"): "sys_vendor",
    ("System Information", "Product Name"): "product_name",
    ("System Information", "Version"): "product_version",
    ("System Information", "Serial Number"): "product_serial",
    ("System Information", "SKU Number"): "product_sku",
    ("System Information", "Family"): "product_family",
    ("Base Board Information", "Manufacturer"): "board_vendor",
    ("Base Board Information", "Product Name"): "board_name",
    ("Base Board Information", "Version"): "board_version",
    ("Base Board Information", "Serial Number"): "board_serial",
    ("Base Board Information", "Asset Tag"): "board_asset_tag",
    ("Chassis Information", "Manufacturer"): "chassis_vendor",
    ("Chassis Information", "Version"): "chassis_version",
    ("Chassis Information", "Serial Number"): "chassis_serial",
    ("Chassis Information", "Asset Tag"): "chassis_asset_tag",
}
# SMBIOS structure types (DMTF DSP0134) of the type strings above, as NHC's -t takes them too.
DMI_TYPES: dict[str, str] = {
    "0": "BIOS Information",
    "1": "System Information",
    "2": "Base Board Information",
    "3": "Chassis Information",
}
_PREFIX = re.compile(r"\^?([A-Za-z ]+): ([A-Za-z ]+): ")


def field_file(match: str) -> tuple[str, str, str]:
    """(type string, field, dmi-id file) of the one line an NHC match string can match; ValueError says why not.

    A plain string or a glob must spell ``TYPE: FIELD: `` before any wildcard, a ``/regex/``
    must start with ``^TYPE: FIELD: ``; a negated (``!``) match string could be met by any other
    line dmidecode prints, and is refused.
    """
    if match.startswith("!") or match.startswith("{"):
        raise ValueError(f"{match[:60]!r}: a negated or ranged match string could match any of dmidecode's lines")
    regex = len(match) >= 2 and match.startswith("/") and match.endswith("/")
    body = match[1:-1] if regex else match
    found = _PREFIX.match(body)
    if found is None or (regex and not body.startswith("^")) or (not regex and body.startswith("^")):
        raise ValueError(
            f"{match[:60]!r} does not start with 'TYPE: FIELD: ' (a regex with '^TYPE: FIELD: '),"
            " so it could match lines of dmidecode's that /sys/class/dmi/id does not have"
        )
    key = (found.group(1), found.group(2))
    if key not in DMI_FIELDS:
        raise ValueError(f"'{key[0]}: {key[1]}' is not among the strings the kernel exports in /sys/class/dmi/id")
    return key[0], key[1], DMI_FIELDS[key]


def dmi_line(type_string: str, field: str, value: str) -> str:
    """The line NHC makes of one of dmidecode's fields (lbnl_dmi.nhc: the type string, then the field)."""
    return f"{type_string}: {field}: {value}"
