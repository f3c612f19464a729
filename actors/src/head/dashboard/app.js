// ftdrive dashboard
