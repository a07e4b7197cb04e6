"""The calibration file and what it says of a threshold, below the features that read it.

``accel.calibration.store``: the file format (one YAML per model, pydantic); ``accel.calibration.inert``: whether a
cache threshold can act on the calibrated model (``threshold_status``) and the range in which it can
(``observed_ranges``). Making a calibration (running the model) is ``accel.calibrate``, a layer above the features.
"""
